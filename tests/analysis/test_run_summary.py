"""Headline step-time numbers: the first step and the profiled steps are left out."""

from __future__ import annotations

import pandas as pd

from app.analysis.run_summary import compute_step_time_stats
from app.data.store_rows import row_from_records


def _records() -> list[dict]:
    # step 0: one-off costs; steps 2-3: inside a profiler window (the agent marks them)
    times = [1.0, 0.1, 0.5, 0.5, 0.1, 0.1]
    rows = [{"step": i, "rank": 0, "step_time_s": t, "samples": 32} for i, t in enumerate(times)]
    for r in rows[2:4]:
        r["profiled"] = True
    return rows


def test_overview_stats_leave_out_profiled_steps() -> None:
    stats = compute_step_time_stats(pd.DataFrame(_records()))
    assert stats is not None and stats.steps == 3 and abs(stats.median_s - 0.1) < 1e-12


def test_only_profiled_steps_are_still_counted() -> None:
    rows = [{**r, "profiled": True} for r in _records()]
    stats = compute_step_time_stats(pd.DataFrame(rows))
    assert stats is not None and stats.steps == 5


def test_catalog_row_leaves_out_profiled_steps(make_run) -> None:  # noqa: ANN001
    from profiler_agent import runformat as rf

    run_dir = make_run("p")
    manifest = rf.read_manifest(run_dir)
    row = row_from_records(run_dir, manifest, manifest.status, _records(), [])
    assert abs(row["mean_step_time_s"] - 0.1) < 1e-12
