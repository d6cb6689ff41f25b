"""Sample variant, training dynamics: a regression whose gradient norm explodes, or is clipped.

One flag turns the problem on and off: ``--clip-grad-norm 0`` (the problem: SGD with momentum at a
learning rate too high for this loss; each large gradient throws the weights further out, the norm
grows by orders of magnitude within 20 steps and the loss ends NaN) or ``--clip-grad-norm 1`` (the
fix: ``torch.nn.utils.clip_grad_norm_`` before every ``optimizer.step()``; the same run trains).
Plain argparse + PyTorch; knows nothing about Torchscope. Synthetic seeded data, CPU, seconds.

    python sample_models/variants/gradient_clipping.py --clip-grad-norm 0
    python sample_models/variants/gradient_clipping.py --clip-grad-norm 1
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs with a large scale (std 2) and a noisy linear target: steep curvature for SGD."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g) * 2
    w = torch.randn(features, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clip-grad-norm", type=float, default=0.0, help="max gradient norm (0 = no clipping, the problem)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = make_data(512, 32, seed=0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        idx = torch.randint(0, len(x), (args.batch_size,), generator=g)
        loss = F.mse_loss(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4g}", flush=True)


if __name__ == "__main__":
    main()
