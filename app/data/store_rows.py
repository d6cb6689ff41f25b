"""One catalog row per run, computed from the raw records without pandas (data layer).

The Runs page and ``torchscope ls`` summarise every run of a store; building DataFrames for
each small run costs ~20 ms, plain Python over the JSON-lines records ~1 ms, which is what
makes a cold store of 1,000 runs list in seconds. The rules (which step times, which memory
column) are documented in docs/app.md and shared with the Overview tab: the step time through
app.data.step_time (pure Python over records, no app imports), the peak through
:func:`peak_memory_from_records`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from app.data.final_value import final_value
from app.data.step_time import steady_step_time
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["STEPS_SOURCES", "load_run_row", "row_from_records", "peak_memory_from_records", "search_text",
           "run_group"]

# Where a row's steps and step time come from (column ``steps_source``): the run's metrics.jsonl;
# the profiled steps of its traces, read from the trace analysis cache (app.workspace.cached_steps);
# or not known yet: the run has traces that were never analysed (opening the run fills it in).
STEPS_SOURCES = ("metrics", "trace", "in trace")

# GPU runs: the allocator's peak; CPU runs: resident set of the process and its children.
_GPU_PEAK_KEYS = ("peak_memory_bytes", "gpu_max_allocated_bytes", "gpu_allocated_bytes")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _rank(record: Mapping[str, Any]) -> int:
    r = _num(record.get("rank"))
    return int(r) if r is not None else 0


def peak_memory_from_records(
    records: Iterable[Mapping[str, Any]], rank: int | None = None
) -> tuple[int | None, str]:
    """(peak bytes, what it measures) from system samples: the GPU allocator's peak when
    sampled, else the largest resident set of the process plus its children (DataLoader workers)."""
    rows = [r for r in records if rank is None or _rank(r) == rank]
    for key in _GPU_PEAK_KEYS:
        values = [v for v in (_num(r.get(key)) for r in rows) if v is not None]
        if values:
            return int(max(values)), "GPU allocated (peak)"
    rss = []
    for r in rows:
        v = _num(r.get("rss_bytes"))
        if v is not None:
            rss.append(v + (_num(r.get("children_rss_bytes")) or 0.0))
    if rss:
        return int(max(rss)), "resident set of the process and its children (peak sample)"
    return None, ""


def run_group(m: rf.Manifest) -> str | None:
    """The run's replicate group (``torchscope run --group NAME``), or None: a typed manifest
    field when the run format has one, else the ``group`` key kept in ``Manifest.extra``."""
    group = getattr(m, "group", None)
    if group is None:
        group = m.extra.get("group") if isinstance(m.extra, Mapping) else None
    if group is None or isinstance(group, bool):
        return None
    text = str(group).strip()
    return text or None


def search_text(m: rf.Manifest) -> str:
    """Lower-case text the catalog filter searches: name, id, tags, notes, config ``key=value``."""
    parts = [m.name, m.id, *m.tags, m.notes, run_group(m) or "", *(f"{k}={v}" for k, v in m.config.items())]
    return " ".join(str(p) for p in parts).lower()


def _step_stats(metrics: list[Mapping[str, Any]]) -> dict[str, Any]:
    rank0 = sorted(
        (r for r in metrics if _rank(r) == 0 and _num(r.get("step")) is not None),
        key=lambda r: _num(r.get("step")),
    )  # type: ignore[arg-type, return-value]
    # Count training steps only: an evaluation line (val_loss) is written at the step *after*
    # the last optimizer step when the job evaluates at its end.
    trained = [r for r in rank0 if any(k in r for k in ("loss", "step_time_s", "lr"))] or rank0
    steps = int(max(_num(r["step"]) for r in trained)) + 1 if trained else None  # type: ignore[type-var]
    # The final loss: median of the last window of rank 0's values (app.data.final_value).
    final = final_value(metrics, "loss")
    # The headline step time: the steady-state median (app.data.step_time), every rank.
    headline = steady_step_time(metrics)
    return {
        "steps": steps,
        "final_loss": final.value if final is not None else None,
        "step_time_s": headline.value_s,
        "mean_step_time_s": headline.mean_s,
        "step_time_steps": headline.n_used if headline.value_s is not None else None,
        "samples_per_s": headline.samples_per_s,
    }


def row_from_records(
    path: Path,
    manifest: rf.Manifest,
    status: rf.RunStatus,
    metrics: list[Mapping[str, Any]],
    system: list[Mapping[str, Any]],
) -> dict[str, Any]:
    """The catalog row (STORE_COLUMNS + EXTRA_COLUMNS of app.data.runs) of one run."""
    m = manifest
    peak, _ = peak_memory_from_records(system)
    steps = _step_stats(metrics)
    # Metrics without step times (TensorBoard scalars imported beside traces) leave the steps to the traces.
    if steps["step_time_s"] is not None or (steps["steps"] is not None and not layout.list_trace_files(path)):
        source = "metrics"
    else:  # listing the traces folder is one directory read; no trace is opened here
        source = "in trace" if layout.list_trace_files(path) else ""
    row: dict[str, Any] = {
        "id": m.id,
        "name": m.name,
        "status": str(status),
        "started_at": m.started_at,  # epoch seconds; app.data.runs turns the column into UTC times
        "duration_s": m.duration_s,
        **steps,
        "steps_source": source,
        "peak_memory_bytes": peak,
        # No devices recorded (an imported trace without deviceProperties) is unknown, not "cpu":
        # such traces often hold GPU kernels.
        "device": ", ".join(str(d.get("name", d.get("type", "?"))) for d in m.devices),
        "tags": ", ".join(m.tags),
        "group": run_group(m),
        "git_commit": str(m.git.get("commit") or "")[:10],
        "path": str(path),
        "notes": m.notes,
        "world_size": m.world_size,
        "search_text": search_text(m),
    }
    return row


def load_run_row(
    run_dir: str | os.PathLike[str], *, now: float | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(catalog row, problems) of one run, reading run.json, metrics.jsonl and system.jsonl.

    Raises the run format's errors for the manifest (NotARunError, CorruptFileError,
    SchemaVersionError); bad lines of the JSON-lines files become problem messages.
    """
    run_dir = Path(run_dir)
    manifest = rf.read_manifest(run_dir)
    metrics = rf.read_jsonl(run_dir / layout.METRICS)
    system = rf.read_jsonl(run_dir / layout.SYSTEM)
    row = row_from_records(
        run_dir, manifest, rf.effective_status(manifest, now=now), metrics.records, system.records
    )
    problems = [f"{run_dir.name}: {p}" for p in (*metrics.skipped, *system.skipped)]
    return row, problems
