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


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    # (op table, annotation table) as app/analysis/ops.py returns them for a GPU step of 100 ms:
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
    from app.analysis.run_summary import compute_ops_view

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
    from app.analysis.run_summary import compute_annotations_view

    steps = pd.DataFrame({"step": [1, 2], "duration_us": [50_000.0, 50_000.0]})
    _, annotations = _tables()
    view = compute_annotations_view(annotations, steps)
    assert view["name"].tolist() == ["## backward ##", "Optimizer.step#SGD.step"]
    assert view["pct_of_step"].tolist() == [60.5, 9.0]
    assert compute_annotations_view(annotations, None)["pct_of_step"].isna().all()


def test_gpu_trace_ops_view_sums_below_the_steps(shared_data) -> None:  # noqa: ANN001
    from app.analysis.ops import compute_annotation_table, compute_op_table
    from app.analysis.run_summary import compute_annotations_view, compute_ops_view
    from app.data.trace import load_trace

    trace = load_trace(shared_data / "traces" / "nccl_distributed" / "nccl_data.json.gz", use_cache=False)
    view = compute_ops_view(compute_op_table(trace), None)
    assert "## backward ##" not in set(view["name"]) and "nccl:all_reduce" in set(view["name"])
    assert view["pct_of_step"].sum() < 100  # 140% while the ranges were rows
    assert "## backward ##" in set(compute_annotations_view(compute_annotation_table(trace), None)["name"])
