"""Agent overhead: per-step time of a training loop run bare vs under ``torchscope run``, alternating.

    python -m benchmarks.overhead                      # 4 rounds of 150 steps each way
    python -m benchmarks.overhead --rounds 6 --steps 300 --json out.json

Each round starts the same loop twice in fresh processes, once bare and once wrapped by the
launcher (default profiler schedule, so one window of 5 iterations), alternating which goes
first. The loop times every iteration itself (data, forward, backward, optimizer step) with
``perf_counter``; the comparison drops the first ``--skip`` iterations of both (warm-up and
the profiler window) so it measures what steps outside windows pay. Reported: the median step
time of each mode over all kept steps, the overhead ratio, and the spread of the per-round
ratios. Target: at most 2 % slower.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_loop(steps: int, batch_size: int, width: int, out: Path) -> None:
    """The timed training loop (child process): the optimized sample model on in-memory data."""
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
    times: list[float] = []
    done = False
    while not done:
        it = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
            if len(times) >= steps:
                done = True
                break
    out.write_text(json.dumps(times))


def _child_cmd(args: argparse.Namespace, out: Path) -> list[str]:
    return [sys.executable, "-m", "benchmarks.overhead", "--child", str(out), "--steps", str(args.steps),
            "--batch-size", str(args.batch_size), "--width", str(args.width)]


def _measure(args: argparse.Namespace, wrapped: bool, store: Path, work: Path, index: int) -> list[float]:
    out = work / f"{'wrapped' if wrapped else 'bare'}-{index}.json"
    cmd = _child_cmd(args, out)
    if wrapped:
        cmd = [sys.executable, "-m", "profiler_agent", "run", "--root", str(store), "--name", f"overhead-{index}",
               "--", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = json.loads(out.read_text())
    return times[args.skip:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--skip", type=int, default=15, help="leading steps dropped from both (warm-up, window)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_loop(args.steps, args.batch_size, args.width, args.child)
        return 0
    bare: list[float] = []
    wrapped: list[float] = []
    round_ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="torchscope-overhead-") as tmp:
        work = Path(tmp)
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {w: _measure(args, w, work / "runs", work, i) for w in order}
            bare += got[False]
            wrapped += got[True]
            ratio = statistics.median(got[True]) / statistics.median(got[False])
            round_ratios.append(ratio)
            print(f"round {i + 1}/{args.rounds}: bare {statistics.median(got[False]) * 1e3:.2f} ms, "
                  f"wrapped {statistics.median(got[True]) * 1e3:.2f} ms, ratio {ratio:.4f}", flush=True)
    result = {
        "steps_per_round": len(bare) // args.rounds,
        "rounds": args.rounds,
        "bare_median_step_ms": statistics.median(bare) * 1e3,
        "wrapped_median_step_ms": statistics.median(wrapped) * 1e3,
        "overhead_ratio": statistics.median(wrapped) / statistics.median(bare),
        "round_ratio_min": min(round_ratios),
        "round_ratio_max": max(round_ratios),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
