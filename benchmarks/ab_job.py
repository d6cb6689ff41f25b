"""A/B benchmark job: a tiny MLP trained by a hand-written loop with a functional loss, and a known slowdown.

Written for the A/A and power benchmark (benchmarks/ab_verdicts.py) and the ``torchscope ab``
tests, deliberately unlike sample_models/: parameters held in a plain module as raw tensors,
``F.linear``/``F.gelu``/``F.cross_entropy`` (no ``nn`` layers, no loss module), no DataLoader.
Seeded and synthetic; knows nothing of Torchscope.

``--slowdown PCT`` adds real compute to every optimizer step: after the step's own work, small
matrix products run until PCT % of the time the iteration took so far has been spent on them.
The extra work is therefore PCT % of each step whatever the machine's speed or load (a fixed
amount of extra FLOPs would be a different percentage on every machine), and it is compute, not
sleep, so contention slows it like the rest of the step.

    python benchmarks/ab_job.py --steps 80 --slowdown 25
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


class TinyMLP(torch.nn.Module):
    """Two hidden layers as raw parameters (``F.linear``), so no ``nn.Linear`` hooks shape its steps."""

    def __init__(self, features: int, hidden: int, classes: int, generator: torch.Generator) -> None:
        super().__init__()

        def weight(rows: int, cols: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(rows, cols, generator=generator) / cols**0.5)

        self.w1, self.b1 = weight(hidden, features), torch.nn.Parameter(torch.zeros(hidden))
        self.w2, self.b2 = weight(hidden, hidden), torch.nn.Parameter(torch.zeros(hidden))
        self.w3, self.b3 = weight(classes, hidden), torch.nn.Parameter(torch.zeros(classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(F.linear(x, self.w1, self.b1))
        x = F.gelu(F.linear(x, self.w2, self.b2))
        return F.linear(x, self.w3, self.b3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80, help="optimizer steps (default 80)")
    p.add_argument("--slowdown", type=float, default=0.0, metavar="PCT",
                   help="extra compute per step, in %% of the step's own time (default 0)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024,
                   help="hidden width; sets the step time (default 1024: ~25 ms a step on one core)")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: steadier on a shared machine)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1 or args.slowdown < 0 or args.threads < 1:
        p.error("--steps and --threads must be >= 1 and --slowdown >= 0")
    return args


def burn(fraction: float, elapsed_s: float, a: torch.Tensor, b: torch.Tensor) -> None:
    """Multiply ``a @ b`` until ``fraction * elapsed_s`` seconds have gone: PCT % more real work."""
    if fraction <= 0:
        return
    deadline = time.perf_counter() + fraction * elapsed_s
    while time.perf_counter() < deadline:
        torch.mm(a, b)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    model = TinyMLP(args.features, args.hidden, 10, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    pool = 8  # a few fixed batches, cycled: the data costs nothing and every run sees the same ones
    xs = torch.randn(pool, args.batch_size, args.features, generator=gen)
    ys = torch.randint(0, 10, (pool, args.batch_size), generator=gen)
    # Small enough to stay in cache (a larger product slowed the step around it: +25 % gave x1.32)
    # and to end within a few microseconds of the deadline.
    burn_a = torch.randn(64, 64, generator=gen)
    burn_b = torch.randn(64, 64, generator=gen)
    fraction = args.slowdown / 100.0
    for step in range(args.steps):
        t0 = time.perf_counter()
        logits = model(xs[step % pool])
        loss = F.cross_entropy(logits, ys[step % pool])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        burn(fraction, time.perf_counter() - t0, burn_a, burn_b)
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
