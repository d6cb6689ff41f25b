"""Small queries and actions on a run store: what the commands ask while runs are being recorded, and the Runs page's archive and delete (workspace layer)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from app.data.runs import archive_run, delete_run
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["store_manifests", "progress_step_time", "archive_run", "delete_run"]


def store_manifests(root: str | os.PathLike[str] | None) -> dict[Path, rf.Manifest]:
    """Run folder → manifest of every run of the store ``root``; empty when the store does not exist yet."""
    try:
        return dict(rf.list_runs(root).runs)
    except rf.RunStoreNotFoundError:
        return {}


def progress_step_time(run_dir: Path) -> float | None:
    """A quick median step time of a run just recorded, for a progress line only (a verdict uses
    the comparison's own step sets): rank 0, no profiled or evaluation steps, the first step
    (one-off costs) left out; None without step times."""
    times = [r["step_time_s"] for r in rf.read_samples(run_dir / layout.METRICS).records
             if isinstance(r.get("step_time_s"), (int, float)) and r.get("rank", 0) == 0
             and not r.get("profiled") and not r.get("evaluation")]
    return float(np.median(times[1:] or times)) if times else None
