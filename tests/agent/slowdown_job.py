"""A training script whose steps become about 4x slower from step 30 on; knows nothing of Torchscope.

Hand-written loop over random batches: a residual MLP that applies one wide layer ``depth``
times, plain SGD. From iteration ``--slow-from`` on it is applied 40 instead of 8 times (real
extra compute, forward and backward): a step takes 4-5x as long (5.2 -> 22 ms, fastest of 30, on
one thread of this project's 2-core VM, measured without the agent). One
evaluation (``model.eval()`` + ``no_grad``, an accuracy, no loss) runs before iteration
``--eval-at``. Prints ``done`` at the end.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn


class Repeated(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.layer = nn.Linear(width, width)
        self.head = nn.Linear(width, 4)
        self.depth = 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.depth):
            x = x + torch.tanh(self.layer(x))
        return self.head(x)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--slow-from", type=int, default=30)
    p.add_argument("--eval-at", type=int, default=45)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Repeated(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width)
    y = torch.randint(0, 4, (args.batch,))
    for it in range(args.iters):
        if it == args.eval_at:
            model.eval()
            with torch.no_grad():
                accuracy = (model(x).argmax(-1) == y).float().mean().item()
            print(f"eval {it} {accuracy:.3f}")
            model.train()
        model.depth = 40 if it >= args.slow_from else 8
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    print("done")


if __name__ == "__main__":
    main()
