"""Everything ``torchscope analyze`` reports about a set of traces, in one object (analysis layer).

``analyze_traces(traces)`` computes steps (both breakdowns), ops, kernels and memory peaks once;
``TraceAnalysis.to_json()`` is the documented, stable CLI document::

    {"traces": [{path, rank, events, warnings}], "steps": [...], "ops": [...] (self_us desc),
     "kernels": [...], "memory": {device: {peak_allocated_bytes, peak_reserved_bytes}},
     "ranks": [{step, ranks, slowest_rank, slowest_us, fastest_rank, fastest_us, spread_us}]}
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from app.analysis.trace.breakdown import compute_breakdown
from app.analysis.trace.distributed import compute_overlap, compute_rank_skew
from app.analysis.trace.kernels import compute_kernel_table
from app.analysis.memory.events import compute_memory_peaks
from app.analysis.trace.ops import compute_op_table
from app.analysis.trace.steps import compute_steps

__all__ = ["TraceAnalysis", "analyze_traces", "JSON_STEP_KEYS", "ANALYSIS_VERSION", "analysis_version"]

# Bump when what analyze_traces computes changes. The cached tables (app/data/trace_analysis_cache)
# are also keyed by a digest of the analysis modules' source, so an edit invalidates them anyway.
ANALYSIS_VERSION = 1
_TABLES = ("steps", "breakdown", "ops", "kernels", "memory_peaks", "rank_skew", "overlap")
# The analysis modules whose code keys the cache (files relative to app/analysis).
_SOURCES = ("trace/steps", "trace/breakdown", "trace/ops", "trace/kernels", "memory/events", "trace/distributed",
            "trace/summary", "trace/categories", "trace/intervals", "trace/step_spans", "trace/step_views",
            "trace/event_tree", "trace/op_modules")

JSON_STEP_KEYS = ["rank", "step", "start_us", "end_us", "duration_us", "kernel_us", "memcpy_us", "memset_us",
                  "communication_us", "runtime_us", "dataloader_us", "cpu_exec_us", "other_us", "forward_us",
                  "backward_us", "optimizer_us"]


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else round(v, 3)
    if hasattr(v, "item"):  # numpy scalar
        return _clean(v.item())
    return v


def _records(df: pd.DataFrame, cols: Sequence[str]) -> list[dict[str, Any]]:
    cols = [c for c in cols if c in df.columns]
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


@dataclass(frozen=True)
class TraceAnalysis:
    """Results of analyze_traces; tables are pandas DataFrames, ``memory`` is keyed by device."""

    traces: list[dict[str, Any]]
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    ops: pd.DataFrame
    kernels: pd.DataFrame
    memory_peaks: pd.DataFrame
    rank_skew: pd.DataFrame  # per step number: slowest/fastest rank (empty for one rank)
    overlap: pd.DataFrame  # per (rank, step): computation/communication overlap (empty without kernels)
    from_cache: bool = field(default=False, compare=False)  # the tables were read from the analysis cache

    @property
    def memory(self) -> dict[str, dict[str, int]]:
        """``{device: {peak_allocated_bytes, peak_reserved_bytes}}``; with several ranks the key
        is ``rank<R>/<device>``."""
        multi = self.memory_peaks["rank"].nunique() > 1
        out = {}
        for r in self.memory_peaks.itertuples(index=False):
            key = f"rank{r.rank}/{r.device}" if multi else str(r.device)
            out[key] = {"peak_allocated_bytes": int(r.peak_allocated_bytes),
                        "peak_reserved_bytes": int(r.peak_reserved_bytes)}
        return out

    def to_json(self, *, max_ops: int | None = None, max_kernels: int | None = None) -> dict[str, Any]:
        """The CLI document (see the module docstring); field names are stable."""
        ops = self.ops if max_ops is None else self.ops.head(max_ops)
        kernels = self.kernels if max_kernels is None else self.kernels.head(max_kernels)
        return {
            "traces": self.traces,
            "steps": _records(self.steps, JSON_STEP_KEYS),
            "ops": _records(ops, ["name", "calls", "self_us", "total_us", "device_self_us", "mean_us", "share"]),
            "kernels": _records(kernels, ["name", "calls", "total_us", "mean_us", "share"]),
            "memory": self.memory,
            "ranks": _records(self.rank_skew, list(self.rank_skew.columns)),
        }


@lru_cache(maxsize=1)
def _source_digest() -> str:
    here = Path(__file__).resolve().parents[1]
    h = hashlib.sha1()
    for name in _SOURCES:
        h.update((here / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


def analysis_version() -> str:
    """What the cached analysis tables are keyed by: ANALYSIS_VERSION, the analysis code, pandas."""
    return f"{ANALYSIS_VERSION}\0{_source_digest()}\0{pd.__version__}"


def _compute(traces: list[Any]) -> dict[str, pd.DataFrame]:
    steps = compute_steps(traces)
    step_total = float(steps["duration_us"].sum()) if len(steps) else None
    return {
        "steps": steps,
        "breakdown": compute_breakdown(traces, steps),
        "ops": compute_op_table(traces, steps_us=step_total),
        "kernels": compute_kernel_table(traces),
        "memory_peaks": compute_memory_peaks(traces),
        "rank_skew": compute_rank_skew(steps),
        "overlap": compute_overlap(traces, steps),
    }


def analyze_traces(traces: Sequence[Any], *, use_cache: bool = True) -> TraceAnalysis:
    """Compute steps, breakdown, ops, kernels and memory peaks of TraceTables (one per rank).

    When every trace comes from (or was written to) the trace cache, the tables are cached next to
    it (app/data/trace_analysis_cache) and a later call reads them instead of any event.
    """
    from app.data import trace_analysis_cache as tac

    traces = list(traces)
    entries = [getattr(t, "cache_entry", None) for t in traces]
    folder = None
    if use_cache and traces and all(e is not None for e in entries):
        folder = tac.analysis_dir(entries, [int(t.rank) for t in traces], analysis_version())
    tables = tac.read_analysis(folder, _TABLES) if folder is not None else None
    hit = tables is not None
    if tables is None:
        tables = _compute(traces)
        if folder is not None:
            tac.write_analysis(folder, tables)
    return TraceAnalysis(
        traces=[{"path": str(t.path), "rank": int(t.rank), "events": int(t.n_events), "warnings": list(t.warnings)}
                for t in traces],
        **tables, from_cache=hit,
    )
