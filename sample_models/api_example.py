"""Sample job using Torchscope's Python API (``profiler_agent.Run``) instead of the zero-code wrapper.

The script decides where iterations end (``run.step()``), logs its own validation metrics
(``run.log``), asks for an extra profiler window late in training (``run.profile_window``)
and passes its hyperparameters explicitly. Run under ``torchscope run`` it attaches to that run.

    python sample_models/api_example.py --steps 20 --root runs
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import profiler_agent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="api-example")
    p.add_argument("--root", default=None)
    p.add_argument("--eval-every", type=int, default=5)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    true_w = torch.randn(32, 4)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    schedule = profiler_agent.ProfileSchedule(wait=2, warmup=1, active=2, repeat=1)
    with profiler_agent.Run(name=args.name, root=args.root, config=vars(args), tags=["api"],
                            schedule=schedule) as run:
        for step in range(args.steps):
            x = torch.randn(args.batch_size, 32)
            y = (x @ true_w).argmax(1)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            run.step()
            if (step + 1) % args.eval_every == 0:
                with torch.no_grad():
                    xv = torch.randn(256, 32)
                    val_loss = F.cross_entropy(model(xv), (xv @ true_w).argmax(1))
                run.log(val_loss=val_loss)
                print(f"step {step + 1} loss {loss.item():.4f} val_loss {val_loss.item():.4f}", flush=True)
            if step == args.steps - 5:
                run.profile_window(warmup=1, active=2)
        print(f"recorded {run.dir}")


if __name__ == "__main__":
    main()
