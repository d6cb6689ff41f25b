"""A hand-written loop with a functional loss and a held-out evaluation: the job behind the
golden fixture runs in tests/data/golden/runs (recorded once, committed; see tests/golden/README.md)."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 4))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    xs, ys = torch.randn(512, 32), torch.randint(0, 4, (512,))
    for step in range(args.steps):
        i = (step * args.batch) % 480
        loss = F.cross_entropy(net(xs[i : i + args.batch]), ys[i : i + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 8 == 7:
            net.eval()
            with torch.no_grad():
                val = F.cross_entropy(net(xs[480:]), ys[480:])
            net.train()
            print(f"step {step} loss {loss.item():.4f} val {val.item():.4f}")


if __name__ == "__main__":
    main()
