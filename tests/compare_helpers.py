"""Helpers shared by the comparison tests (analysis, CLI, page)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["overload", "skip_if_overloaded", "write_steps_run", "write_step_trace"]


def overload() -> str | None:
    """A reason when the machine is oversubscribed (load above 1.5x the cores), else None: timing
    figures recorded then measure the other jobs as much as the code."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f"machine overloaded (load {load:.1f} on {cores} cores)" if load > 1.5 * cores else None


def skip_if_overloaded(verdict: str, detail: str = "", contention: Any = None) -> None:
    """A timing verdict needs a machine that is not oversubscribed. When the verdict is not the
    expected "faster" and the load is far above the core count (other jobs competing for the
    CPUs while the samples were recorded), "same" is the honest answer: skip, do not fail. So is
    "inconclusive" when the comparison's contention check (``Comparison.contention``) found that
    the two runs saw different contention."""
    if verdict == "inconclusive" and contention is not None and contention.inconclusive:
        pytest.skip(f"the runs saw different contention: {contention.reason} {detail}")
    if verdict != "faster" and (busy := overload()):
        pytest.skip(f"{busy}: verdict {verdict} {detail}")


def check_sample_speedup(verdict: str, ratio: float, lo: float | None, hi: float | None) -> None:
    """The sample optimized run against its baseline (about 2x faster per step): never a wrong
    direction, the ratio clearly below 1, and ``faster`` whenever the interval excludes 1. The
    test store records 20 steps; a level shift in the baseline's first steps can widen the
    serial-correlation-corrected interval past 1 (a real, documented loss of power), and then
    ``same`` is the method's honest answer: skip, naming the interval."""
    assert verdict != "slower", (verdict, ratio, lo, hi)
    assert ratio < 0.8, (verdict, ratio, lo, hi)
    if hi is not None and hi < 1.0:
        assert verdict == "faster", (verdict, ratio, lo, hi)
        return
    assert verdict in ("same", "inconclusive"), (verdict, ratio, lo, hi)
    pytest.skip(f"underpowered: ratio {ratio:.3f}, interval {lo}–{hi} includes 1 (verdict {verdict})")


def write_steps_run(
    root: Path,
    name: str,
    times: Sequence[float],
    *,
    samples: int | Sequence[int] | None = 32,
    tokens: Sequence[int] | None = None,
    contention: float | Sequence[float] | None = None,
    steal: float | Sequence[float] | None = None,
    evaluation: Iterable[int] = (),
    profiled: Iterable[int] = (),
    group: str | None = None,
    loss: Sequence[float] | None = None,
    cpus: int | None = None,
) -> Path:
    """A run whose metrics.jsonl holds the given per-step times (synthetic, never measured), with
    the agent's optional per-step keys (``samples``, ``tokens``, ``contention``, ``steal``,
    ``evaluation``, ``profiled``) and the manifest's ``group``; written with the run format."""
    extra = {"group": group} if group else {}
    devices = ({"type": "cpu", "name": "x86_64", "count": cpus},) if cpus else ()
    run_dir, _ = rf.create_run(root, name, config={"lr": 0.01}, extra=extra, devices=devices)
    evaluation, profiled = set(evaluation), set(profiled)

    def at(v: Any, i: int) -> Any:
        return v[i] if isinstance(v, (list, tuple, np.ndarray)) else v

    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i, t in enumerate(times):
            rec: dict[str, Any] = {"step": i, "time": float(i), "rank": 0, "step_time_s": float(t)}
            for key, v in (("samples", samples), ("tokens", tokens), ("contention", contention), ("steal", steal),
                           ("loss", loss)):
                if v is not None:
                    rec[key] = at(v, i)
            if i in evaluation:
                rec["evaluation"] = True
            if i in profiled:
                rec["profiled"] = True
            w.write(rec)
    return run_dir


def write_step_trace(path: Path, steps: Sequence[Mapping[str, Any]]) -> Path:
    """A minimal Kineto-style trace: one ``ProfilerStep#N`` span per entry of ``steps``
    (``{"step": N, "ops": {name: µs}, "kernels": {name: µs}}``), back to back from t=0, the ops
    one after the other inside it and each kernel on the device inside the step's span."""
    events: list[dict[str, Any]] = []
    t = 0.0
    for s in steps:
        ops = dict(s.get("ops", {}))
        kernels = dict(s.get("kernels", {}))
        dur = sum(ops.values()) + 10.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s['step']}", "pid": 1, "tid": 1,
                       "ts": t, "dur": dur})
        cursor = t + 5.0
        for name, us in ops.items():
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": cursor, "dur": us})
            cursor += us
        kcur = t + 5.0
        for name, us in kernels.items():
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": kcur,
                           "dur": min(us, max(dur - 10.0, 1.0))})
            kcur += min(us, max(dur - 10.0, 1.0))
        t += dur
    path.write_text(json.dumps({"traceEvents": events}))
    return path
