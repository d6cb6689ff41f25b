"""The run part of ``torchscope analyze``: a run's headline step time and final values, read from its records (workspace layer)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from app.analysis.run.final_value import NOT_OUTCOMES, final_value
from app.analysis.run.step_time import steady_step_time
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["load_run_summary", "has_traces"]


def has_traces(run_dir: Path) -> bool:
    """True when the run folder holds profiler trace files."""
    return bool(layout.list_trace_files(run_dir))


def load_run_summary(run_dir: Path, rank: int | None = None) -> dict[str, Any] | None:
    """The ``"run"`` part of ``analyze --json`` for a Torchscope run folder (None for anything
    else): ``id``, ``name``, ``step_time_s`` and ``step_time_steps`` (the headline step time and
    how many steps it is the median of), ``final``: ``{key: {"value", "window", "count", "label"}}``
    for every logged outcome (loss, val_loss, accuracy, ...)."""
    if not rf.is_run_dir(run_dir):
        return None
    manifest = rf.read_manifest(run_dir)
    records = rf.read_samples(run_dir / layout.METRICS).records
    headline = steady_step_time(records, rank=rank)
    keys = dict.fromkeys(k for r in records for k in r if k not in NOT_OUTCOMES)
    final = {}
    for key in keys:
        fv = final_value(records, str(key), rank=rank)
        if fv is not None:
            final[str(key)] = {"value": fv.value, "window": fv.window, "count": fv.count, "label": fv.label}
    return {"id": manifest.id, "name": manifest.name, "step_time_s": headline.value_s,
            "step_time_steps": headline.n_used if headline.value_s is not None else 0,
            "step_time_dropped": headline.describe_dropped(), "final": final}
