"""Variant: ``optimizer.zero_grad(set_to_none=False)`` (``--problem``) or ``set_to_none=True`` (``--fixed``).

Zeroing keeps every ``.grad`` allocated between steps and writes zeros over it (one
``aten::zero_`` per parameter inside ``Optimizer.zero_grad``); ``set_to_none=True`` drops the
gradients instead, so backward allocates them afresh and nothing is written. A wide MLP with
many parameter tensors makes both visible on a CPU in a few milliseconds per step.

    torchscope run --name zero-grad-problem --no-graph -- python sample_models/variants/zero_grad.py --problem
    torchscope run --name zero-grad-fixed --no-graph -- python sample_models/variants/zero_grad.py --fixed
"""
from __future__ import annotations

import argparse

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--problem", action="store_true", help="zero_grad(set_to_none=False)")
    side.add_argument("--fixed", action="store_true", help="zero_grad(set_to_none=True)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.ReLU(inplace=True)]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, args.width)
    y = torch.randint(0, 10, (args.batch_size,))
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=bool(args.fixed))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
