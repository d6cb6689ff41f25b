"""Sample variant, training dynamics: a regression whose validation loss plateaus at a constant
learning rate, or one that lowers the rate on the plateau and stops early.

One flag turns the problem on and off: ``--schedule constant`` (the problem: SGD at a fixed
learning rate reaches the noise floor that rate allows within ~30 steps, then spends the rest of
its steps there) or ``--schedule plateau`` (the fix: ``ReduceLROnPlateau`` on the validation
loss, which lowers the floor, and early stopping once validation stops improving).
Plain argparse + PyTorch; knows nothing about Torchscope. Synthetic seeded data, CPU, seconds.

    python sample_models/variants/lr_plateau.py --schedule constant
    python sample_models/variants/lr_plateau.py --schedule plateau
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

# Early stopping: this many evaluations without a 1% improvement of the best val_loss end the run.
STOP_PATIENCE = 4
MIN_IMPROVEMENT = 0.01


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A noisy linear target (noise variance 0.25: the best reachable MSE), train and validation sets."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(16, 1, generator=g)
    x, xv = torch.randn(n, 16, generator=g), torch.randn(n // 8, 16, generator=g)
    return x, x @ w + 0.5 * torch.randn(n, 1, generator=g), xv, xv @ w + 0.5 * torch.randn(n // 8, 1, generator=g)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedule", choices=("constant", "plateau"), default="constant",
                   help="constant lr for all steps (the problem) or ReduceLROnPlateau + early stopping")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.2)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y, xv, yv = make_data(2048, seed=0)
    g = torch.Generator().manual_seed(1)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = (torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.2, patience=1, threshold=MIN_IMPROVEMENT)
                 if args.schedule == "plateau" else None)
    best, bad = float("inf"), 0
    for step in range(args.steps):
        idx = torch.randint(0, len(x), (args.batch_size,), generator=g)
        loss = F.mse_loss(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % args.eval_every:
            continue
        model.eval()
        with torch.no_grad():
            val = F.mse_loss(model(xv), yv).item()
        model.train()
        print(f"step {step} val_loss {val:.4f} lr {optimizer.param_groups[0]['lr']:.3g}", flush=True)
        if scheduler is None:
            continue
        scheduler.step(val)
        if val < best * (1 - MIN_IMPROVEMENT):
            best, bad = val, 0
        else:
            bad += 1
            if bad >= STOP_PATIENCE:
                print(f"early stop at step {step}: no improvement in {bad} evaluations", flush=True)
                break


if __name__ == "__main__":
    main()
