"""Variant: float32 matmuls (``--problem``) or bfloat16 autocast on the CPU (``--fixed``:
``torch.autocast("cpu", dtype=torch.bfloat16)`` around forward and loss).

An MLP of wide linear layers: matmuls are most of the step. bfloat16 pays off on CPUs with
native bf16 arithmetic (AMX, AVX512-BF16); elsewhere oneDNN converts and computes in float32,
so autocast only adds conversions and is slower (docs/variants.md has the measured numbers).

    torchscope run --name bf16-problem --no-graph -- python sample_models/variants/mixed_precision.py --problem
    torchscope run --name bf16-fixed --no-graph -- python sample_models/variants/mixed_precision.py --fixed
"""
from __future__ import annotations

import argparse
import contextlib

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--problem", action="store_true", help="float32 everywhere")
    side.add_argument("--fixed", action="store_true", help="bfloat16 autocast for forward and loss")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
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
        opt.zero_grad(set_to_none=True)
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if args.fixed else contextlib.nullcontext()
        with amp:
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
