"""Tests of app.analysis.trace.lanes: readable, ordered lane names from Kineto's thread metadata."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from app.analysis.trace.lanes import compute_lane_labels


def _events(rows: list[tuple[str, str, str, str, int | None, int | None]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["name", "cat", "pid", "tid", "device", "stream"])
    for c in ("device", "stream"):
        df[c] = pd.array(df[c], dtype="Int64")
    for c in ("name", "cat", "pid", "tid"):
        df[c] = df[c].astype("category")
    return df


def _threads(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["pid", "tid", "kind", "name"])


# A GPU training process as torch 2.x writes it: main thread, autograd thread, a runtime call on
# a thread Kineto could not map (negative id), kernels on two streams, a device-wide sync.
EVENTS = _events([
    ("aten::mm", "cpu_op", "100", "100", None, None),
    ("autograd::engine::evaluate_function: MmBackward0", "cpu_op", "100", "205", None, None),
    ("cudaLaunchKernel", "cuda_runtime", "100", "-1029147072", None, None),
    ("gemm", "kernel", "0", "20", 0, 20),
    ("copy", "gpu_memcpy", "0", "7", 0, 7),
    ("Context Sync", "cuda_sync", "0", "-1", 0, -1),
    ("Stream Sync", "cuda_sync", "0", "7", 0, 7),
])
THREADS = _threads([
    ("100", "0", "process", "python3.10"),
    ("100", "100", "thread", "thread 100 (pt_main_thread)"),
    ("100", "205", "thread", "thread 205 (pt_main_thread)"),
    ("100", "205", "thread", "thread 205 (pt_autograd_0)"),
    ("100", "205", "thread", "thread 205 (pt_main_thread)"),  # a later plain name does not undo autograd
    ("0", "7", "thread", "stream 7 "),
    ("0", "-1", "thread", "Device 0"),
])


def test_labels_and_order() -> None:
    lanes = compute_lane_labels(EVENTS, THREADS)
    assert lanes.order == [
        "main thread (tid 100)", "autograd thread (tid 205)", "unknown thread",
        "GPU 0 · device-wide", "GPU 0 · stream 7", "GPU 0 · stream 20",  # streams by number, not text
    ]
    assert lanes.per_event.tolist() == [
        "main thread (tid 100)", "autograd thread (tid 205)", "unknown thread",
        "GPU 0 · stream 20", "GPU 0 · stream 7", "GPU 0 · device-wide", "GPU 0 · stream 7",
    ]
    assert set(lanes.per_event) == set(lanes.order)


def test_no_bare_or_negative_ids() -> None:
    labels = compute_lane_labels(EVENTS, THREADS).order
    assert not any(re.search(r"-\d", label) for label in labels)
    assert not any(re.fullmatch(r"(thread )?\d+", label) for label in labels)


def test_autograd_thread_recognised_by_its_ops_without_a_name() -> None:
    threads = THREADS[THREADS["name"] != "thread 205 (pt_autograd_0)"]
    assert "autograd thread (tid 205)" in compute_lane_labels(EVENTS, threads).order
    plain = EVENTS[~EVENTS["name"].astype(str).str.startswith("autograd::")]
    extra = _events([("aten::add", "cpu_op", "100", "205", None, None)])
    both = pd.concat([plain, extra], ignore_index=True)
    assert "thread (tid 205)" in compute_lane_labels(both, threads).order


def test_named_threads_several_unknown_and_no_metadata() -> None:
    ev = _events([
        ("a", "cpu_op", "100", "300", None, None),
        ("b", "cuda_runtime", "100", "-5", None, None),
        ("c", "cuda_runtime", "100", "-6", None, None),
        ("d", "cpu_op", "100", "100", None, None),
    ])
    th = _threads([("100", "300", "thread", "thread 300 (pt_data_worker)")])
    assert compute_lane_labels(ev, th).order == [
        "main thread (tid 100)", "pt_data_worker (tid 300)", "unknown thread 1", "unknown thread 2"]
    assert compute_lane_labels(ev, None).order == [
        "main thread (tid 100)", "thread (tid 300)", "unknown thread 1", "unknown thread 2"]


def test_several_host_processes_are_prefixed() -> None:
    ev = _events([("a", "cpu_op", "100", "100", None, None), ("b", "cpu_op", "7", "7", None, None)])
    th = _threads([("100", "0", "process", "trainer")])
    assert compute_lane_labels(ev, th).order == [
        "pid 7 · main thread (tid 7)", "trainer (pid 100) · main thread (tid 100)"]


def test_empty() -> None:
    lanes = compute_lane_labels(EVENTS.iloc[0:0], THREADS)
    assert lanes.order == [] and lanes.per_event.empty


@pytest.mark.parametrize("name", [
    "nccl_distributed/nccl_data.json.gz", "gpu_before_after/control.json.gz",
    "cuda_event_sync/event_sync_trace.json.gz", "rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
])
def test_real_traces_host_first_no_negative_ids(shared_data: Path, name: str) -> None:
    from app.data.trace import load_trace

    trace = load_trace(shared_data / "traces" / name, use_cache=False)
    work = trace.events[trace.events["cat"] != "Trace"]  # the timeline leaves out the profiler's own span
    order = compute_lane_labels(work, trace.threads).order
    assert order[0].startswith("main thread (tid ")
    is_device = [label.startswith("GPU ") for label in order]
    assert any(is_device) and is_device == sorted(is_device)  # every host lane above every device lane
    assert not any(re.search(r"-\d", label) for label in order)
