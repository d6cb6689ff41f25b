"""Module scopes' cost: step time of the baseline sample model with and without ``nn.Module`` ranges.

    python -m benchmarks.module_scopes_overhead                 # 30 pairs of steps per phase
    python -m benchmarks.module_scopes_overhead --pairs 60 --batch-size 8 --json out.json

One process, one CPU thread, the baseline sample's ``SmallResNet`` (width 16, 32x32 images by
default) on an in-memory batch: forward, ``CrossEntropyLoss`` module, backward, SGD step. Two
phases, each timed in lockstep pairs (A then B, then B then A, ...) so both sides see the same
background load on a shared machine:

- ``window``: inside a ``torch.profiler.profile`` set up as the agent's windows are (CPU
  activity, ``record_shapes``, ``profile_memory``), steps with ``ModuleScopes`` installed vs not;
- ``outside``: no profiler; steps with the hooks installed vs none. The agent never runs this
  "installed" side (it removes the hooks at each window's end): it shows what removing them saves.
  After ``uninstall()`` the global hook dicts are checked to be empty, i.e. modules are back on
  torch's hook-free fast path.

Reported for wall time (``perf_counter``) and process CPU time (``process_time``, less sensitive
to other jobs on a shared machine): median step time of each side, the ratio of medians, the
median of the per-pair ratios, and the added time per range (difference of medians / module
calls per step). ``per_call_*`` times the hooks alone: 2,000 calls of an ``nn.Identity`` on a
one-element tensor, scopes installed vs not, inside and outside a profiler (median of 7 rounds).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _make_step(batch_size: int, width: int, image_size: int) -> tuple[Callable[[], None], Any]:
    import torch
    from torch import nn

    from sample_models.resnet_baseline import SmallResNet

    torch.manual_seed(0)
    model = SmallResNet(width=width)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch_size, 3, image_size, image_size)
    y = torch.randint(0, 10, (batch_size,))

    def step() -> None:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step, model


def _timed(step: Callable[[], None]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - start, time.process_time() - cpu


def _summary(with_s: list[float], without_s: list[float], calls: int) -> dict[str, float]:
    ratios = [a / b for a, b in zip(with_s, without_s, strict=True)]
    return {
        "with_median_ms": statistics.median(with_s) * 1e3,
        "without_median_ms": statistics.median(without_s) * 1e3,
        "ratio_of_medians": statistics.median(with_s) / statistics.median(without_s),
        "median_pair_ratio": statistics.median(ratios),
        "added_us_per_range": (statistics.median(with_s) - statistics.median(without_s)) * 1e6 / calls,
    }


def _pairs(step: Callable[[], None], on: Callable[[], None], off: Callable[[], None], pairs: int,
           calls: int) -> dict[str, Any]:
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for i in range(pairs):
        for scoped in ((True, False) if i % 2 == 0 else (False, True)):
            (on if scoped else off)()
            w, c = _timed(step)
            wall[scoped].append(w)
            cpu[scoped].append(c)
        off()
    return {"wall": _summary(wall[True], wall[False], calls), "cpu": _summary(cpu[True], cpu[False], calls)}


def _per_call(on: Callable[[], None], off: Callable[[], None]) -> dict[str, float]:
    import torch
    from torch import nn

    ident, x, n = nn.Identity(), torch.zeros(1), 2000

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(n):
            ident(x)
        return time.perf_counter() - start

    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(7):
        for scoped in ((True, False) if i % 2 == 0 else (False, True)):
            (on if scoped else off)()
            times[scoped].append(loop())
        off()
    return {"with_us_per_call": statistics.median(times[True]) * 1e6 / n,
            "without_us_per_call": statistics.median(times[False]) * 1e6 / n}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    import torch
    from torch.nn.modules import module as module_globals
    from torch.profiler import ProfilerActivity, profile

    from profiler_agent.failures import FailureLog
    from profiler_agent.module_scopes import ModuleScopes

    torch.set_num_threads(1)
    step, model = _make_step(args.batch_size, args.width, args.image_size)
    failures = FailureLog(None)
    scopes = ModuleScopes(failures, lambda: model)
    for _ in range(3):
        step()  # allocator and first-call costs out of the way

    calls = 0

    def count(module: Any, inputs: Any) -> None:
        nonlocal calls
        calls += 1

    handle = module_globals.register_module_forward_pre_hook(count)
    step()
    handle.remove()

    result: dict[str, Any] = {"ranges_per_step": calls, "batch_size": args.batch_size, "width": args.width,
                              "image_size": args.image_size, "pairs": args.pairs, "threads": 1}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
        result["window"] = _pairs(step, scopes.install, scopes.uninstall, args.pairs, calls)
        result["per_call_window"] = _per_call(scopes.install, scopes.uninstall)
    result["outside"] = _pairs(step, scopes.install, scopes.uninstall, args.pairs, calls)
    result["per_call_outside"] = _per_call(scopes.install, scopes.uninstall)
    result["hooks_left_after_uninstall"] = len(module_globals._global_forward_pre_hooks) + len(
        module_globals._global_forward_hooks)
    result["agent_errors"] = failures.count
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
