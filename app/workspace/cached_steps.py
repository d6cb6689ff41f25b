"""A run's profiled steps read from the trace engine's analysis cache, never from a trace (workspace layer).

The runs catalog (Runs page, ``torchscope ls``) lists 1,000 runs in seconds, so it must not parse a
trace. A run without metrics.jsonl (an imported trace or tb-profiler folder) still has steps: those
the profiler recorded. When the run's traces were analysed once (its Run page was opened, or
``torchscope analyze`` ran on it), ``app.workspace.traces.analyze_trace_set`` left a ``steps`` table in the analysis cache
(app/data/trace_analysis_cache); this module finds that table with a few ``stat`` calls and small
JSON reads, exactly as ``analyze_trace_set`` would, and returns None when it is not there.
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.analysis.run.step_time import steady_step_time
from app.data import trace_cache

# The same rank and file listing load_traces uses: the analysis key must be built identically.
from app.data.trace import list_trace_paths, trace_rank
from app.errors import UsageError
from app.workspace.traces import analysis_folder

__all__ = ["TraceSteps", "read_cached_trace_steps", "fill_steps_from_traces", "STEPS_FROM_METRICS",
           "STEPS_FROM_TRACE", "STEPS_IN_TRACE"]

# Values of the catalog's ``steps_source`` column (app.data.store_rows).
STEPS_FROM_METRICS = "metrics"
STEPS_FROM_TRACE = "trace"
STEPS_IN_TRACE = "in trace"

_STEPS_TABLE = "steps.arrow"


@dataclass(frozen=True)
class TraceSteps:
    """The profiled steps of the lowest rank: how many, and their mean duration in seconds;
    ``step_time_s``: the headline step time of the traces' steps (app.analysis.run.step_time: median
    over steps of the slowest rank's duration, as Compare computes it for bare traces)."""

    rank: int
    steps: int
    mean_step_time_s: float
    step_time_s: float | None = None
    step_time_steps: int = 0


def read_cached_trace_steps(run_dir: str | os.PathLike[str]) -> TraceSteps | None:
    """The run's profiled steps from the analysis cache of all its traces, or None when any trace
    has no cache entry, the set was never analysed by the current analysis code, or no step was
    found. Reads no trace event."""
    try:
        paths = list_trace_paths(run_dir)
    except (UsageError, OSError):
        return None
    keyed: list[tuple[int, str, Path]] = []
    for p in paths:
        try:
            entry = trace_cache.cache_entry_dir(p)
        except OSError:
            return None
        cached = trace_cache.read_cached_meta(entry)
        if cached is None:
            return None
        keyed.append((trace_rank(p, cached.meta), p.name, entry))
    if not keyed:
        return None
    keyed.sort(key=lambda k: (k[0], k[1]))  # load_traces' order, which the analysis key follows
    folder = analysis_folder([e for _, _, e in keyed], [r for r, _, _ in keyed])
    try:
        with pa.memory_map(str(folder / _STEPS_TABLE), "r") as f:
            steps = pa.ipc.open_file(f).read_all().select(["rank", "step", "duration_us"]).to_pylist()
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None
    durations = [(int(s["rank"]), s["duration_us"]) for s in steps if s["rank"] is not None]
    if not durations:
        return None
    rank = min(r for r, _ in durations)
    mine = [float(d) for r, d in durations if r == rank and d is not None and math.isfinite(float(d))]
    if not mine:
        return None
    headline = steady_step_time(
        ({"rank": s["rank"], "step": s["step"],
          "step_time_s": s["duration_us"] / 1e6 if isinstance(s["duration_us"], (int, float)) else None}
         for s in steps),
        from_trace=True,
    )
    return TraceSteps(rank=rank, steps=len(mine), mean_step_time_s=sum(mine) / len(mine) / 1e6,
                      step_time_s=headline.value_s, step_time_steps=headline.n_used)


def fill_steps_from_traces(row: MutableMapping[str, Any]) -> bool:
    """Fill ``steps`` and ``mean_step_time_s`` of a catalog row marked ``in trace`` from the
    analysis cache (``steps_source`` becomes ``trace``); True when filled. Other rows are left."""
    if row.get("steps_source") != STEPS_IN_TRACE:
        return False
    found = read_cached_trace_steps(row["path"])
    if found is None:
        return False
    row["steps"] = found.steps
    row["mean_step_time_s"] = found.mean_step_time_s
    row["step_time_s"] = found.step_time_s
    row["step_time_steps"] = found.step_time_steps if found.step_time_s is not None else None
    row["steps_source"] = STEPS_FROM_TRACE
    return True
