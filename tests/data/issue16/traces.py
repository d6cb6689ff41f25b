"""Tiny Chrome traces made for issue 16's number defects, one builder per defect.

Each returns a trace document (``{"traceEvents": [...]}``) with just the events its defect needs;
``write`` puts one on disk for the loader. Times are µs, as Kineto writes them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def x(name: str, cat: str, ts: float, dur: float, *, tid: int = 1, pid: int = 1, **args: Any) -> Event:
    """A complete (``ph: X``) event."""
    ev: Event = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def launch(op: str, ts: float, corr: int, kernel: str, k_ts: float, k_dur: float, *, tid: int = 1,
           runtime: str = "cuda_runtime", device_cat: str = "kernel", device_pid: int = 0) -> list[Event]:
    """An op (10 µs) with a runtime call inside it launching one device event ``kernel``."""
    return [x(op, "cpu_op", ts, 10, tid=tid, **{"External id": corr}),
            x("cudaLaunchKernel", runtime, ts + 2, 5, tid=tid, correlation=corr, **{"External id": corr}),
            x(kernel, device_cat, k_ts, k_dur, pid=device_pid, tid=7, correlation=corr, device=0, stream=7,
              **{"External id": corr})]


def doc(events: list[Event], **meta: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **meta, "traceEvents": events}


def write(path: Path, trace: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


def steps(n: int, length: float = 1000.0, start: float = 0.0) -> list[Event]:
    return [x(f"ProfilerStep#{i + 1}", "user_annotation", start + i * length, length - 1) for i in range(n)]


def long_kernel(n_steps: int) -> dict[str, Any]:
    """Defect 1: ``n_steps`` steps, each launching a 4 µs kernel, and one 415 µs kernel that starts
    inside the last step without a launch recorded in it and runs on past the profiled steps."""
    ev = steps(n_steps)
    for i in range(n_steps):
        ev += launch("aten::add", i * 1000 + 100, 100 + i, "add_kernel", i * 1000 + 150, 4)
    last_end = n_steps * 1000 - 1
    ev.append(x("long_kernel", "kernel", last_end - 2, 415, pid=0, tid=7, device=0, stream=7, correlation=999))
    return doc(ev)


def dropped_trailing_step() -> dict[str, Any]:
    """Defect 2: three steps; the third launches no device work (dropped from the step table by
    torch-tb-profiler's rule) but runs ``All2All_Pooled_Req`` (311 µs) and ``AddmmBackward0``."""
    ev = steps(3)
    for i in range(2):
        ev += launch("aten::mm", i * 1000 + 100, 10 + i, "gemm", i * 1000 + 120, 50)
    ev += [x("All2All_Pooled_Req", "cpu_op", 2100, 311), x("AddmmBackward0", "cpu_op", 2500, 40)]
    return doc(ev)


def memory_deltas_only() -> dict[str, Any]:
    """Defect 3: ``[memory]`` events with ``Bytes`` deltas but no ``Total Allocated``: CPU and
    cuda:0 grow by 3 MiB and 2 MiB at their peaks."""
    ev = steps(1, length=1000)
    mib = 1 << 20
    for ts, dev_type, dev_id, nbytes in ((10, 0, -1, 2 * mib), (20, 0, -1, mib), (30, 0, -1, -2 * mib),
                                         (40, 1, 0, 2 * mib), (50, 1, 0, -mib), (60, 1, 0, mib // 2)):
        ev.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                   "args": {"Device Type": dev_type, "Device Id": dev_id, "Addr": 1000 + ts, "Bytes": nbytes}})
    return doc(ev)


def mtia() -> dict[str, Any]:
    """Defect 4: an MTIA step: ``mtia_runtime`` launches, ``mtia_ccp_events`` device work (600 µs
    of the 1000 µs step), and events of a category nobody knows (``npu_kernel``)."""
    ev = steps(1)
    ev += launch("aten::mm", 100, 1, "mtia_gemm", 150, 400, runtime="mtia_runtime", device_cat="mtia_ccp_events")
    ev += launch("aten::relu", 200, 2, "mtia_relu", 560, 200, runtime="mtia_runtime", device_cat="mtia_ccp_events")
    ev.append(x("npu_thing", "npu_kernel", 300, 50, pid=5, tid=9))
    return doc(ev)


def threads_and_annotations() -> dict[str, Any]:
    """Defect 5: ``gloo:all_reduce`` ranges on two worker threads covering most of one 1000 µs step
    (summed: 1,600 µs), and a ``## forward ##`` range recorded as ``cpu_op``."""
    ev = steps(1)
    ev += [x("gloo:all_reduce", "user_annotation", 50, 800, tid=2), x("gloo:all_reduce", "user_annotation", 60, 800, tid=3),
           x("## forward ##", "cpu_op", 10, 900), x("aten::mm", "cpu_op", 20, 300)]
    return doc(ev)


def kernels_without_launch() -> dict[str, Any]:
    """Defect 6: two steps; step 1's two kernels have launches, one more kernel (120 µs) has none."""
    ev = steps(2)
    ev += launch("aten::mm", 100, 1, "gemm", 120, 200)
    ev += launch("aten::mm", 1100, 2, "gemm", 1120, 200)
    ev.append(x("orphan_kernel", "kernel", 500, 120, pid=0, tid=7, device=0, stream=7))
    return doc(ev)
