"""Headline step-time numbers: the steady-state median of app.analysis.run.step_time (warm-up,
profiled and evaluation steps left out), shared by the Overview and the catalog."""

from __future__ import annotations

import pandas as pd

from app.analysis.run.summary import compute_step_time_stats, compute_trace_step_time_stats
from app.workspace.catalog_rows import row_from_records


def _records() -> list[dict]:
    # 30 steps: auto warm-up min(5, 30 // 10) = 3 (steps 0-2, 1.0 s); steps 10-12 inside a
    # profiler window (the agent marks them, 0.5 s); step 20 ran an evaluation (val_loss, 2 s).
    times = [1.0] * 3 + [0.1] * 27
    rows = [{"step": i, "rank": 0, "step_time_s": t, "samples": 32} for i, t in enumerate(times)]
    for r in rows[10:13]:
        r.update(profiled=True, step_time_s=0.5)
    rows[20]["step_time_s"] = 2.0
    rows.append({"step": 20, "rank": 0, "val_loss": 0.3})
    return rows


def test_overview_stats_are_the_steady_state_median() -> None:
    stats = compute_step_time_stats(pd.DataFrame(_records()))
    assert stats is not None
    assert stats.steps == 23 and stats.total_steps == 30
    assert stats.dropped == "3 warm-up, 3 profiled, 1 evaluation"
    assert abs(stats.median_s - 0.1) < 1e-12 and abs(stats.mean_s - 0.1) < 1e-12
    assert abs(stats.samples_per_s - 320.0) < 1e-9


def test_only_profiled_steps_are_still_counted() -> None:
    rows = [{**r, "profiled": True} for r in _records()]
    stats = compute_step_time_stats(pd.DataFrame(rows))
    # every step profiled: none dropped for it; warm-up and evaluation still are
    assert stats is not None and stats.steps == 26 and stats.dropped == "3 warm-up, 1 evaluation"


def test_catalog_row_has_the_same_number_as_the_overview(make_run) -> None:  # noqa: ANN001
    from profiler_agent import runformat as rf

    run_dir = make_run("p")
    manifest = rf.read_manifest(run_dir)
    row = row_from_records(run_dir, manifest, manifest.status, _records(), [])
    stats = compute_step_time_stats(pd.DataFrame(_records()))
    assert row["step_time_s"] == stats.median_s
    assert row["step_time_steps"] == stats.steps == 23
    assert row["mean_step_time_s"] == stats.mean_s
    assert row["samples_per_s"] == stats.samples_per_s


def test_trace_stats_take_the_slowest_rank_per_step() -> None:
    steps = pd.DataFrame({"rank": [0, 1, 0, 1, 0, 1], "step": [5, 5, 6, 6, 7, 7],
                          "duration_us": [100.0, 300.0, 200.0, 100.0, 400.0, 500.0]})
    stats = compute_trace_step_time_stats(steps)
    assert stats is not None and stats.steps == 3 and stats.dropped == "none"
    assert abs(stats.median_s - 300e-6) < 1e-15  # max per step: 300, 200, 500 µs
    one = compute_trace_step_time_stats(steps, rank=0)
    assert one is not None and abs(one.median_s - 200e-6) < 1e-15


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    # (op table, annotation table) as app/analysis/trace/ops.py returns them for a GPU step of 100 ms:
    # "## backward ##" waits on the main thread while the autograd thread runs the backward ops.
    ops = [
        ("aten::mm", "cpu_op", 10, 30_000.0, 35_000.0),
        ("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 10, 50_000.0, 58_000.0),
        ("cudaLaunchKernel", "cuda_runtime", 20, 5_000.0, 5_000.0),
        ("nccl:all_reduce", "user_annotation", 2, 1_000.0, 1_200.0),
    ]
    annotations = [
        ("## backward ##", "user_annotation", 1, 60_000.0, 60_500.0),
        ("Optimizer.step#SGD.step", "user_annotation", 1, 2_000.0, 9_000.0),
    ]
    out = []
    for rows in (ops, annotations):
        df = pd.DataFrame(rows, columns=["name", "category", "calls", "self_us", "total_us"])
        df["share"] = df["self_us"] / 100_000.0
        out.append(df)
    return out[0], out[1]


def test_ops_view_percent_of_step_and_search() -> None:
    from app.analysis.run.summary import compute_ops_view

    steps = pd.DataFrame({"step": [1], "duration_us": [100_000.0]})
    ops, _ = _tables()
    view = compute_ops_view(ops, steps)
    assert view["name"].tolist() == ["autograd::engine::evaluate_function: MmBackward0", "aten::mm",
                                     "cudaLaunchKernel", "nccl:all_reduce"]
    assert view["pct_of_step"].tolist() == [50.0, 30.0, 5.0, 1.0]
    assert compute_ops_view(ops, None)["pct_of_step"].tolist() == [50.0, 30.0, 5.0, 1.0]  # from share
    assert compute_ops_view(ops, steps, "MM")["name"].tolist() == [
        "autograd::engine::evaluate_function: MmBackward0", "aten::mm"]


def test_annotations_view_by_total_time() -> None:
    from app.analysis.run.summary import compute_annotations_view

    steps = pd.DataFrame({"step": [1, 2], "duration_us": [50_000.0, 50_000.0]})
    _, annotations = _tables()
    view = compute_annotations_view(annotations, steps)
    assert view["name"].tolist() == ["## backward ##", "Optimizer.step#SGD.step"]
    assert view["pct_of_step"].tolist() == [60.5, 9.0]
    assert compute_annotations_view(annotations, None)["pct_of_step"].isna().all()


def test_gpu_trace_ops_view_sums_below_the_steps(shared_data) -> None:  # noqa: ANN001
    from app.analysis.run.summary import compute_annotations_view, compute_ops_view
    from app.analysis.trace.ops import compute_annotation_table, compute_op_table
    from app.data.trace import load_trace

    trace = load_trace(shared_data / "traces" / "nccl_distributed" / "nccl_data.json.gz", use_cache=False)
    view = compute_ops_view(compute_op_table([trace]), None)
    assert "## backward ##" not in set(view["name"]) and "nccl:all_reduce" in set(view["name"])
    assert view["pct_of_step"].sum() < 100  # 140% while the ranges were rows
    assert "## backward ##" in set(compute_annotations_view(compute_annotation_table([trace]), None)["name"])
