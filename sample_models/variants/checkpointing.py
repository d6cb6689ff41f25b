"""Variant: every activation kept for backward (``--problem``) or activation checkpointing per
block (``--fixed``: ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)``).

Residual MLP blocks (Linear → GELU → Linear, four times wider inside) on a large batch: their
activations are many times the weights and optimizer state, so the memory the step allocates
for backward sets its peak. Checkpointing keeps only each block's input and recomputes the rest
in backward: the peak falls several-fold and the step takes longer (one more forward per block).

    torchscope run --name ckpt-problem --no-graph -- python sample_models/variants/checkpointing.py --problem
    torchscope run --name ckpt-fixed --no-graph -- python sample_models/variants/checkpointing.py --fixed
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    """x + Linear(GELU(Linear(x))), four times wider inside."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    """A stack of blocks and a linear head; ``checkpointed`` recomputes each block in backward."""

    def __init__(self, width: int, depth: int, checkpointed: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 10)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(x)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--problem", action="store_true", help="keep every activation for backward")
    side.add_argument("--fixed", action="store_true", help="checkpoint each block")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=512)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = Net(args.width, args.depth, checkpointed=bool(args.fixed))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, args.width)
    y = torch.randint(0, 10, (args.batch_size,))
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
