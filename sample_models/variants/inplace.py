"""Variant: out-of-place activations (``--problem``: ``nn.ReLU()``) or in-place ones (``--fixed``:
``nn.ReLU(inplace=True)``).

An out-of-place ReLU allocates a new tensor the size of its input at every call, forward and
(through ``threshold_backward``) backward; in place, it writes over the convolution/batch-norm
output it follows. A stack of conv-bn-relu blocks on small images shows the allocations and the
bytes in a few milliseconds per step on a CPU.

    torchscope run --name inplace-problem --no-graph -- python sample_models/variants/inplace.py --problem
    torchscope run --name inplace-fixed --no-graph -- python sample_models/variants/inplace.py --fixed
"""
from __future__ import annotations

import argparse

import torch
from torch import nn


def make_model(width: int, depth: int, inplace: bool) -> nn.Module:
    """conv-bn-relu blocks, global pooling and a linear head; ReLU in place or not."""
    layers: list[nn.Module] = []
    cin = 3
    for _ in range(depth):
        layers += [nn.Conv2d(cin, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=inplace)]
        cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--problem", action="store_true", help="nn.ReLU() (out of place)")
    side.add_argument("--fixed", action="store_true", help="nn.ReLU(inplace=True)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = make_model(args.width, args.depth, inplace=bool(args.fixed))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 10, (args.batch_size,))
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
