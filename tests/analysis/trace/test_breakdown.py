"""Device-view and training-loop breakdowns: exact small cases and properties on generated traces."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.analysis.trace.breakdown import compute_breakdown
from app.analysis.trace.categories import DEVICE_CATEGORIES
from app.analysis.trace.intervals import covered_us, merge_intervals
from app.analysis.trace.steps import compute_steps
from app.data.trace import load_trace

LOOP_COLS = ["forward_us", "backward_us", "optimizer_us", "loop_dataloader_us", "loop_other_us"]
DEVICE_COLS = [f"{c}_us" for c in DEVICE_CATEGORIES]


def _x(name: str, cat: str, ts: float, dur: float, pid: int | str = 1, tid: int | str = 1, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _load(tmp: Path, events: list[dict], name: str = "t.json") -> object:
    f = tmp / name
    f.write_text(json.dumps({"traceEvents": events}))
    return load_trace(f, use_cache=False)


def test_priority_rules_on_a_hand_made_step(tmp_path: Path) -> None:
    events = [
        _x("ProfilerStep#7", "user_annotation", 0, 100),
        _x("aten::mm", "cpu_op", 0, 60, **{"External id": 1}),
        _x("cudaLaunchKernel", "cuda_runtime", 0, 15, correlation=9, **{"External id": 1}),
        _x("gemm", "kernel", 10, 20, pid=0, tid=7, correlation=9, device=0, stream=7),
        _x("Memcpy HtoD", "gpu_memcpy", 20, 20, pid=0, tid=7, correlation=10, device=0),
        _x("enumerate(DataLoader)#_Iter.__next__", "user_annotation", 70, 10),
    ]
    row = compute_steps([_load(tmp_path, events)]).iloc[0]
    assert row["step"] == 7 and row["duration_us"] == 100
    assert row["kernel_us"] == 20  # [10, 30]
    assert row["memcpy_us"] == 10  # [30, 40]: memcpy under the kernel counts as kernel
    assert row["runtime_us"] == 10  # [0, 10]
    assert row["cpu_exec_us"] == 20  # [40, 60]
    assert row["dataloader_us"] == 10
    assert row["other_us"] == 30
    assert row["memset_us"] == row["communication_us"] == 0


def test_step_is_stretched_to_its_last_kernel_and_tail_steps_dropped(tmp_path: Path) -> None:
    events = []
    for i in range(3):
        t0 = 100.0 * i
        events.append(_x(f"ProfilerStep#{i}", "user_annotation", t0, 50))
        events.append(_x("cudaLaunchKernel", "cuda_runtime", t0 + 5, 5, correlation=i + 1))
        if i < 2:  # the last step's kernel was not captured
            events.append(_x("k", "kernel", t0 + 40, 30, pid=0, tid=7, correlation=i + 1))
    steps = compute_steps([_load(tmp_path, events)])
    assert list(steps["step"]) == [0, 1]
    assert list(steps["end_us"]) == [70.0, 170.0]  # host ended at 50/150, kernels at 70/170
    assert list(steps["duration_us"]) == [70.0, 70.0]


def test_nccl_kernels_and_gloo_ops_are_communication(tmp_path: Path) -> None:
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 100),
        _x("gloo:all_reduce", "user_annotation", 10, 30),
        _x("cudaLaunchKernel", "cuda_runtime", 50, 2, correlation=5),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 60, 20, pid=0, tid=9, correlation=5),
    ]
    row = compute_steps([_load(tmp_path, events)]).iloc[0]
    assert row["communication_us"] == 50 and row["kernel_us"] == 0


def test_loop_view_on_a_training_step(tmp_path: Path) -> None:
    events = [
        _x("ProfilerStep#0", "user_annotation", 0, 100),
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 0, 10),
        _x("Optimizer.zero_grad#SGD.zero_grad", "user_annotation", 10, 5),
        _x("aten::linear", "cpu_op", 15, 25),
        _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 45, 30, tid=2),
        _x("Optimizer.step#SGD.step", "user_annotation", 80, 15),
    ]
    row = compute_steps([_load(tmp_path, events)]).iloc[0]
    assert row["loop_dataloader_us"] == 10 and row["optimizer_us"] == 20
    assert row["forward_us"] == 30  # [15, 45): until backward starts
    assert row["backward_us"] == 30 and row["loop_other_us"] == 10  # [75, 80) and [95, 100)


def test_intervals_helpers() -> None:
    ms, me = merge_intervals(np.array([5, 0, 2, 20]), np.array([8, 3, 6, 30]))
    assert list(ms) == [0, 20] and list(me) == [8, 30]
    assert list(covered_us(ms, me, np.array([0, 4, 10, 25]), np.array([100, 22, 15, 26]))) == [18, 6, 0, 1]


@st.composite
def _traces(draw: st.DrawFn) -> list[dict]:
    events: list[dict] = []
    corr = 0
    t = 0.0
    for step in range(draw(st.integers(1, 4))):
        dur = draw(st.floats(50, 500))
        events.append(_x(f"ProfilerStep#{step}", "user_annotation", t, dur))
        for _ in range(draw(st.integers(0, 8))):
            kind = draw(st.sampled_from(["op", "rt", "dl", "opt", "bwd"]))
            s = t + draw(st.floats(0, dur))
            d = draw(st.floats(0, dur / 2))
            if kind == "rt":
                corr += 1
                events.append(_x("cudaLaunchKernel", "cuda_runtime", s, d, correlation=corr))
                cat = draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]))
                name = draw(st.sampled_from(["gemm", "ncclKernel_x", "Memcpy"]))
                events.append(_x(name, cat, s + draw(st.floats(0, 300)), draw(st.floats(0, 200)),
                                 pid=0, tid=7, correlation=corr))
            else:
                name = {"op": "aten::add", "dl": "enumerate(DataLoader)#It.__next__", "opt": "Optimizer.step#SGD.step",
                        "bwd": "autograd::engine::evaluate_function: X"}[kind]
                events.append(_x(name, "cpu_op", s, d, tid=draw(st.integers(1, 2))))
        t += dur + draw(st.floats(0, 50))
    return events


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=_traces())
def test_breakdowns_always_sum_to_the_step(tmp_path: Path, events: list[dict]) -> None:
    steps = compute_steps([_load(tmp_path, events)])
    assert len(steps) >= 1
    dur = steps["duration_us"].to_numpy()
    assert (dur >= 0).all()
    tol = 1e-6 * np.maximum(dur, 1.0)
    assert (np.abs(steps[DEVICE_COLS].sum(axis=1).to_numpy() - dur) <= tol).all()
    assert (np.abs(steps[LOOP_COLS].sum(axis=1).to_numpy() - dur) <= tol).all()
    assert (steps[DEVICE_COLS + LOOP_COLS].to_numpy() >= -1e-6).all()
    assert (steps["start_us"].to_numpy()[1:] >= steps["end_us"].to_numpy()[:-1] - 1e-9).all()
    bd = compute_breakdown([], steps)
    assert np.allclose(bd.groupby("view")["share"].sum(), 1.0)


SHARED = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces"
# torch-tb-profiler's own per-step Overview costs (kernel, memcpy, memset, communication, runtime,
# dataloader, cpu_exec, other, total), from its parser with kineto master's event mapping
# (benchmarks/tb_profiler_compare.py prints them).
TB_GOLDEN = {
    "gpu_before_after/control.json.gz": [
        [55068.0, 2889.0, 118.0, 32.0, 3150.0, 71.0, 14185.0, 143.0, 75656.0],
        [59335.0, 2866.0, 99.0, 59.0, 3403.0, 67.0, 10896.0, 75.0, 76800.0],
        [62589.0, 2955.0, 87.0, 0.0, 1871.0, 73.0, 8562.0, 97.0, 76234.0],
        [61816.0, 4125.0, 89.0, 0.0, 1884.0, 70.0, 8631.0, 112.0, 76727.0],
        [66149.0, 3014.0, 86.0, 0.0, 2017.0, 68.0, 7040.0, 99.0, 78473.0],
        [64300.0, 2913.0, 89.0, 33.0, 2473.0, 71.0, 11144.0, 97.0, 81120.0]],
    "nccl_distributed/nccl_data.json.gz": [
        [48670.2, 647.2, 121.6, 356.0, 10162.0, 0.0, 162255.1, 230.2, 222442.2],
        [48969.0, 637.0, 122.9, 311.4, 10108.7, 0.0, 159369.6, 208.3, 219726.9],
        [57576.1, 640.0, 116.1, 372.8, 9876.8, 0.0, 156132.5, 221.9, 224936.2]],
    "two_ranks/sampled_rank-1.json.gz": [
        [269884.0, 2108.0, 11.0, 112.0, 2100.0, 0.0, 325067.0, 8622.0, 607904.0],
        [305612.0, 2418.0, 17.0, 13.0, 2242.0, 0.0, 313383.0, 6954.0, 630639.0]],
    "rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz": [
        [110.9, 38.2, 0.0, 0.0, 6698.6, 0.0, 1902.2, 538.5, 9288.3]],
}


@pytest.fixture(scope="module")
def golden_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
@pytest.mark.parametrize("name", sorted(TB_GOLDEN))
def test_device_view_equals_tb_profiler(name: str, golden_cache: Path) -> None:
    steps = compute_steps([load_trace(SHARED / name, cache_dir=golden_cache)], nccl_by_name=False)
    got = steps[DEVICE_COLS + ["duration_us"]].to_numpy()
    assert got.shape == (len(TB_GOLDEN[name]), 9)
    assert np.allclose(got, np.array(TB_GOLDEN[name]), atol=0.06)  # tb's golden numbers are rounded to 0.1
