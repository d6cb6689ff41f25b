"""Issue 16's seven number defects, each on a tiny trace made for it (tests/data/issue16/traces.py)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from app.analysis.compare.tables import diff_kernels, diff_ops
from app.analysis.trace.kernels import compute_temporal_breakdown
from app.analysis.trace.ops import compute_op_table
from app.analysis.trace.summary import analyze_traces
from app.data.trace import load_trace, load_traces
from tests.data.issue16 import traces as T

pytestmark = pytest.mark.usefixtures("module_trace_cache")


def _load(tmp_path: Path, name: str, doc: dict) -> object:
    return load_trace(T.write(tmp_path / f"{name}.pt.trace.json", doc))


def test_1_diff_kernels_count_only_time_inside_the_kept_steps(tmp_path: Path) -> None:
    """A 415 µs kernel starting in the last step and running past it counted whole per step
    (207.5 µs with 2 steps → 415 µs with 1) while the breakdown said ~4 µs of kernel per step."""
    a, b = _load(tmp_path, "a", T.long_kernel(2)), _load(tmp_path, "b", T.long_kernel(1))
    ra, rb = analyze_traces([a]), analyze_traces([b])
    out = diff_kernels(ra, rb, baseline_traces=[a], candidate_traces=[b],
                       baseline_kept=ra.steps, candidate_kept=rb.steps).set_index("name")
    # The kernel is inside each side's steps for 1 µs (the step ends at 1000·n − 1; it starts 2 µs before).
    assert out.loc["long_kernel", "baseline_us"] == pytest.approx(2 / 2)
    assert out.loc["long_kernel", "candidate_us"] == pytest.approx(2 / 1)
    assert out.loc["add_kernel", "baseline_us"] == pytest.approx(4.0)
    # per step, the kernel deltas add up to at most the breakdown's kernel time
    for r, side in ((ra, "baseline_us"), (rb, "candidate_us")):
        assert out[side].sum() <= r.steps["kernel_us"].mean() + 1e-6


def test_2_ops_of_a_dropped_trailing_step_stay_in_the_op_table(tmp_path: Path) -> None:
    t = _load(tmp_path, "t", T.dropped_trailing_step())
    r = analyze_traces([t])
    assert list(r.steps["step"]) == [1, 2]  # step 3 launched no device work: dropped (tb-profiler's rule)
    ops = r.ops.set_index("name")
    assert ops.loc["All2All_Pooled_Req", "self_us"] == pytest.approx(311)
    assert "AddmmBackward0" in ops.index
    assert ops["share"].max() <= 1.0
    # diff's op deltas average the kept steps: the dropped step's ops are not in them
    d = diff_ops(r, r, baseline_traces=[t], candidate_traces=[t], baseline_kept=r.steps, candidate_kept=r.steps)
    assert "All2All_Pooled_Req" not in set(d["name"])


def test_3_memory_peak_from_bytes_deltas_is_their_running_sum(tmp_path: Path) -> None:
    t = _load(tmp_path, "m", T.memory_deltas_only())
    mem = analyze_traces([t]).memory
    mib = 1 << 20
    assert mem["cpu"]["peak_allocated_bytes"] == 3 * mib
    assert mem["cuda:0"]["peak_allocated_bytes"] == 2 * mib
    assert mem["cpu"]["peak_source"] == "running_sum"
    assert mem["cpu"]["peak_reserved_bytes"] is None  # unknown, not 0


def test_3_memory_peak_without_totals_or_deltas_is_unknown(tmp_path: Path) -> None:
    doc = T.memory_deltas_only()
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Bytes"] = 0
    mem = analyze_traces([_load(tmp_path, "m0", doc)]).memory
    assert mem["cpu"]["peak_allocated_bytes"] is None and mem["cpu"]["peak_source"] == "unknown"


def test_4_mtia_device_work_counts_and_unknown_kinds_are_named(tmp_path: Path) -> None:
    t = _load(tmp_path, "mtia", T.mtia())
    r = analyze_traces([t])
    assert r.steps["kernel_us"].iloc[0] == pytest.approx(600)
    assert set(r.kernels["name"]) == {"mtia_gemm", "mtia_relu"}
    assert r.ops.set_index("name").loc["aten::mm", "device_self_us"] == pytest.approx(400)
    warnings = r.traces[0]["warnings"]
    assert any("'npu_kernel'" in w and "not counted as device time" in w for w in warnings), warnings
    assert not any("mtia" in w for w in warnings)


def test_5_shares_are_capped_and_annotations_left_out(tmp_path: Path) -> None:
    t = _load(tmp_path, "thr", T.threads_and_annotations())
    ops = compute_op_table([t]).set_index("name")
    assert ops.loc["gloo:all_reduce", "self_us"] == pytest.approx(1600)  # summed over its two threads
    assert ops.loc["gloo:all_reduce", "threads"] == 2
    assert ops.loc["gloo:all_reduce", "share"] == 1.0  # capped: not 160 %
    assert "## forward ##" not in ops.index  # a range, as torch-tb-profiler's operator view
    assert ops.loc["aten::mm", "share"] == pytest.approx(300 / 999)
    assert (ops["share"] <= 1.0).all()


def test_6_temporal_breakdown_counts_kernels_without_a_launch_unlike_hta(tmp_path: Path) -> None:
    """docs/trace-engine.md: they agree when every device event's launch is recorded; HTA drops
    the others, which ``launched_only=True`` reproduces."""
    t = _load(tmp_path, "orph", T.kernels_without_launch())
    ours = compute_temporal_breakdown([t], drop_last_step=False).iloc[0]
    hta = compute_temporal_breakdown([t], drop_last_step=False, launched_only=True).iloc[0]
    assert ours["compute_us"] == pytest.approx(200 + 200 + 120)
    assert hta["compute_us"] == pytest.approx(400)
    doc = T.kernels_without_launch()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] != "orphan_kernel"]
    t2 = _load(tmp_path, "all_launched", doc)
    a = compute_temporal_breakdown([t2], drop_last_step=False)
    b = compute_temporal_breakdown([t2], drop_last_step=False, launched_only=True)
    pd.testing.assert_frame_equal(a, b)


def test_7_empty_files_in_a_folder_are_named_in_a_warning(tmp_path: Path) -> None:
    T.write(tmp_path / "rank0.pt.trace.json", T.long_kernel(1))
    (tmp_path / "rank1.pt.trace.json").write_bytes(b"")
    (tmp_path / "notes.json").write_text('{"a": 1}')  # other JSON: left out silently
    traces = load_traces(tmp_path)
    assert len(traces) == 1
    warnings = [w for t in traces for w in t.warnings]
    assert any("rank1.pt.trace.json" in w and "empty" in w for w in warnings), warnings
    assert not any("notes.json" in w for w in warnings)
