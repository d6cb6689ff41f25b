"""Agent overhead: per-step time of the same training loop bare vs under ``torchscope run``, in lockstep.

    python -m benchmarks.overhead                           # 2 pairs of processes, 300 steps each
    python -m benchmarks.overhead --pairs 3 --steps 500 --json out.json
    python -m benchmarks.overhead --inprocess --pairs 10 --steps 20   # hooks only, one process
    python -m benchmarks.overhead --hooks --pairs 12 --steps 200      # each of issue 11's hooks alone

Two processes run the same loop (the optimized sample model on in-memory data, one CPU
thread): one bare, one wrapped by the launcher with the default profiler schedule. The parent
lets them take turns, one training step at a time, alternating which goes first in each pair of
steps, so both see the same background load at nearly the same moment (this matters on a
shared machine whose load swings by 2x within seconds). Each child times its own iterations
(data, forward, backward, optimizer step, and in the wrapped one everything the agent does
in its hooks) with ``perf_counter``. The first ``--skip`` steps (warm-up and the profiler
window) are dropped from both, so the result is what steps outside profiler windows pay.

Reported for wall time and for process CPU time (all threads, so the agent's sampler thread
counts; far less sensitive to other jobs on a shared machine): median step time of each, the
ratio of medians, and the median of the per-step ratios (wrapped step i / bare step i).
Target: at most 1.02.

``--hooks`` prices each hook added for issue 11 on its own, in one process with an agent
session (profiling off): a tiny step (an MLP, ``F.cross_entropy`` on the model's output in the
loop) runs in blocks with every hook on and in blocks with one hook switched off, rotating
between variants; a hook's cost per step is the difference of the blocks' median process-CPU
step times. Reported in microseconds and as a share of the optimized sample model's step
(measured in the same process) and of the tiny step itself (a worst case: a step that does
almost nothing). ``SummaryWriter`` capture costs only when the job logs: it is timed per
``add_scalar`` call (wrapped vs torch's own), once per step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]


def run_child(batch_size: int, width: int, control: IO[str], report: IO[str]) -> None:
    """The timed loop: waits for a line on ``control`` before each step, reports its time on ``report``."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from sample_models.data import TensorPairDataset, make_images
    from sample_models.resnet_optimized import SmallSeparableResNet

    torch.manual_seed(0)
    torch.set_num_threads(1)
    images, labels = make_images(1024, classes=10, size=32, seed=0)
    loader = DataLoader(TensorPairDataset(images, labels), batch_size=batch_size, shuffle=True, drop_last=True)
    model = SmallSeparableResNet(width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    report.write("ready\n")
    report.flush()
    it = iter(loader)
    for line in control:
        if line.strip() != "step":
            break
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        report.write(f"{time.perf_counter() - start!r} {time.process_time() - cpu_start!r}\n")
        report.flush()


def run_inprocess(blocks: int, steps: int, batch_size: int, width: int) -> dict[str, float]:
    """Hooks only, one process: alternate blocks of steps without and with an agent session.

    Immune to load swings between processes; measures what the hooks, the metrics writer and
    the sampler thread cost per step (the session's first steps, which draw the model, are
    dropped; profiling is off).
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from profiler_agent.activation import start_session, stop_session
    from profiler_agent.options import AgentOptions
    from profiler_agent.runformat import create_run
    from sample_models.data import TensorPairDataset, make_images
    from sample_models.resnet_optimized import SmallSeparableResNet

    torch.manual_seed(0)
    torch.set_num_threads(1)
    images, labels = make_images(1024, classes=10, size=32, seed=0)
    loader = DataLoader(TensorPairDataset(images, labels), batch_size=batch_size, shuffle=True, drop_last=True)
    model = SmallSeparableResNet(width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = [next(iter(loader)) for _ in range(8)]

    def step(i: int) -> float:
        start = time.process_time()
        x, y = batches[i % len(batches)]
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        return time.process_time() - start

    for i in range(10):
        step(i)
    bare: list[float] = []
    agent: list[float] = []
    with tempfile.TemporaryDirectory(prefix="torchscope-overhead-") as tmp:
        for _ in range(blocks):
            bare += [step(i) for i in range(steps)]
            run_dir, _ = create_run(tmp, "inprocess")
            session = start_session(run_dir, AgentOptions(profile=False))
            agent += [step(i) for i in range(steps + 3)][3:]
            stop_session(session)
    return {"blocks": blocks, "steps_per_block": steps,
            "bare_median_cpu_ms": round(statistics.median(bare) * 1e3, 3),
            "agent_median_cpu_ms": round(statistics.median(agent) * 1e3, 3),
            "cpu_ratio_of_medians": round(statistics.median(agent) / statistics.median(bare), 4)}


HOOKS = ("functional-loss capture", "evaluation detection", "anomaly-window watcher", "compile counters",
         "contention sampling")


def _without(name: str, session: Any) -> Callable[[], None]:
    """Switch hook ``name`` off in ``session`` (or its classes); return what switches it back on."""
    from profiler_agent.anomaly import SlowSteps
    from profiler_agent.compilation import CompileWatch
    from profiler_agent.contention import StepCpu
    from profiler_agent.evaluation_steps import EvaluationSteps

    if name == "functional-loss capture":
        session.evaluation.uninstall()
        return session.evaluation.install  # type: ignore[no-any-return]
    patches: dict[str, list[tuple[type, str, Any]]] = {
        "evaluation detection": [(EvaluationSteps, "watch", lambda self, output: None)],
        "anomaly-window watcher": [(SlowSteps, "observe", lambda self, *a, **k: None)],
        "compile counters": [(CompileWatch, "take_step", lambda self: {})],
        "contention sampling": [(StepCpu, "start", lambda self: None), (StepCpu, "finish", lambda self: {})],
    }
    saved = [(cls, attr, cls.__dict__[attr]) for cls, attr, _ in patches[name]]
    for cls, attr, value in patches[name]:
        setattr(cls, attr, value)

    def restore() -> None:
        for cls, attr, value in saved:
            setattr(cls, attr, value)

    return restore


def _writer_cost_us(calls: int) -> float | None:
    """Median extra time of one wrapped ``SummaryWriter.add_scalar`` over torch's own (µs), or None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    import torch.utils.tensorboard.writer as writer_module

    from profiler_agent import tensorboard

    tensorboard.patch_summary_writer(writer_module)  # idempotent: the watcher may have done it
    with tempfile.TemporaryDirectory(prefix="torchscope-tb-") as tmp:
        writer = SummaryWriter(tmp)
        wrapped = SummaryWriter.add_scalar
        original = getattr(wrapped, "__wrapped__", None)
        if original is None or not getattr(wrapped, tensorboard._MARK, False):
            writer.close()
            return None
        extra = []
        for block in range(10):
            times = {}
            for name, fn in (("ours", wrapped), ("torch", original)):
                start = time.process_time()
                for i in range(calls):
                    fn(writer, "Loss/train", 0.5, block * calls + i)
                times[name] = (time.process_time() - start) / calls
            extra.append(times["ours"] - times["torch"])
        writer.close()
    return statistics.median(extra) * 1e6


def run_hooks(blocks: int, steps: int, batch_size: int, width: int) -> dict[str, Any]:
    """Each issue-11 hook's cost per step: blocks with all hooks on vs blocks with one switched off."""
    import torch
    import torch.nn.functional as F

    from profiler_agent.activation import start_session, stop_session
    from profiler_agent.options import AgentOptions
    from profiler_agent.runformat import create_run

    torch.manual_seed(0)
    torch.set_num_threads(1)
    sample_step = run_inprocess(2, 10, batch_size, width)["bare_median_cpu_ms"] / 1e3
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))

    def block() -> float:
        times = []
        for _ in range(steps):
            start = time.process_time()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            times.append(time.process_time() - start)
        return statistics.median(times)

    variants = ("all", *HOOKS)
    medians: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="torchscope-hooks-") as tmp:
        run_dir, _ = create_run(tmp, "hooks")
        session = start_session(run_dir, AgentOptions(profile=False, graph=False))
        try:
            block()  # the first step (model discovery, manifest) and warm-up
            for b in range(blocks):
                for name in variants[b % len(variants):] + variants[: b % len(variants)]:
                    restore = _without(name, session) if name != "all" else (lambda: None)
                    try:
                        medians[name].append(block())
                    finally:
                        restore()
            # F.cross_entropy is looked up at each call in the loop above, so the wrapper was in use.
            writer = _writer_cost_us(200)  # while the session records the scalars
        finally:
            stop_session(session)
    tiny_step = statistics.median(medians["all"])
    result: dict[str, Any] = {"blocks": blocks, "steps_per_block": steps,
                              "tiny_step_cpu_us": round(tiny_step * 1e6, 1),
                              "sample_step_cpu_ms": round(sample_step * 1e3, 2), "hooks": {}}
    for name in HOOKS:
        cost = statistics.median(a - w for a, w in zip(medians["all"], medians[name], strict=True))
        result["hooks"][name] = {"cost_per_step_us": round(cost * 1e6, 2),
                                 "share_of_sample_step": round(cost / sample_step, 5),
                                 "share_of_tiny_step": round(cost / tiny_step, 4)}
    if writer is not None:
        result["hooks"]["SummaryWriter capture (one add_scalar per step)"] = {
            "cost_per_step_us": round(writer, 1), "share_of_sample_step": round(writer * 1e-6 / sample_step, 5),
            "share_of_tiny_step": round(writer * 1e-6 / tiny_step, 4)}
    return result


def _start(args: argparse.Namespace, wrapped: bool, store: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "benchmarks.overhead", "--child", "--batch-size", str(args.batch_size),
           "--width", str(args.width)]
    if wrapped:
        cmd = [sys.executable, "-m", "profiler_agent", "run", "--root", str(store), "--name", "overhead", "--",
               *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, bufsize=1)
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child {'wrapped' if wrapped else 'bare'} exited before starting")
        if line.strip() == "ready":
            return proc


def _step(proc: subprocess.Popen[str]) -> tuple[float, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("step\n")
    proc.stdin.flush()
    while True:  # the wrapped job's output passes through the launcher: skip anything else
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("child exited mid-benchmark")
        try:
            wall, cpu = line.split()
            return float(wall), float(cpu)
        except ValueError:
            continue


Times = list[tuple[float, float]]  # (wall seconds, process CPU seconds) per step


def run_pair(args: argparse.Namespace, store: Path) -> tuple[Times, Times]:
    """Start a bare and a wrapped child, step them in turn; return their kept step times."""
    bare, wrapped = _start(args, False, store), _start(args, True, store)
    times: dict[bool, Times] = {False: [], True: []}
    try:
        for i in range(args.steps):
            order = (False, True) if i % 2 == 0 else (True, False)
            for which in order:
                times[which].append(_step(wrapped if which else bare))
    finally:
        for proc in (bare, wrapped):
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in (bare, wrapped):
            proc.wait(timeout=120)
    return times[False][args.skip:], times[True][args.skip:]


def _ratio(bare: Times, wrapped: Times, index: int) -> float:
    return statistics.median(t[index] for t in wrapped) / statistics.median(t[index] for t in bare)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=2, help="bare/wrapped process pairs (2)")
    p.add_argument("--steps", type=int, default=300, help="steps per process (300)")
    p.add_argument("--skip", type=int, default=20, help="leading steps dropped from both (20)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument("--inprocess", action="store_true",
                   help="instead: one process, blocks of steps without/with the agent's hooks (--pairs blocks)")
    p.add_argument("--hooks", action="store_true",
                   help="instead: each issue-11 hook's cost per step, one process (--pairs blocks of --steps)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(args.batch_size, args.width, sys.stdin, sys.stdout)
        return 0
    if args.hooks:
        result_hooks = run_hooks(args.pairs, args.steps, args.batch_size, args.width)
        print(json.dumps(result_hooks, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result_hooks, indent=2) + "\n")
        return 0
    if args.inprocess:
        result_in = run_inprocess(args.pairs, args.steps, args.batch_size, args.width)
        print(json.dumps(result_in, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result_in, indent=2) + "\n")
        return 0
    bare: Times = []
    wrapped: Times = []
    with tempfile.TemporaryDirectory(prefix="torchscope-overhead-") as tmp:
        for i in range(args.pairs):
            b, w = run_pair(args, Path(tmp) / "runs")
            bare += b
            wrapped += w
            print(f"pair {i + 1}/{args.pairs}: wall {_ratio(b, w, 0):.4f}, cpu {_ratio(b, w, 1):.4f} "
                  f"(bare wall median {statistics.median(t[0] for t in b) * 1e3:.2f} ms)", flush=True)
    result: dict[str, object] = {"pairs": args.pairs, "steps_kept_per_process": len(bare) // args.pairs}
    for index, kind in ((0, "wall"), (1, "cpu")):
        result[f"bare_median_{kind}_ms"] = round(statistics.median(t[index] for t in bare) * 1e3, 3)
        result[f"wrapped_median_{kind}_ms"] = round(statistics.median(t[index] for t in wrapped) * 1e3, 3)
        result[f"{kind}_ratio_of_medians"] = round(_ratio(bare, wrapped, index), 4)
        result[f"{kind}_median_per_step_ratio"] = round(
            statistics.median(w[index] / b[index] for b, w in zip(bare, wrapped, strict=True) if b[index] > 0), 4)
    result["target_ratio"] = 1.02
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
