"""A tiny DistributedDataParallel job on CPU (gloo) for the agent's multi-rank test; knows nothing of Torchscope."""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def _busy(seconds: float) -> None:
    """Compute (matrix products) for ``seconds``: a straggler whose cause is compute."""
    end = time.perf_counter() + seconds
    a = torch.randn(64, 64)
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--slow-rank", type=int, default=None, help="this rank computes --slow-ms longer each step")
    p.add_argument("--slow-ms", type=float, default=0.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    slow = args.slow_ms / 1e3 if dist.get_rank() == args.slow_rank else 0.0
    for _ in range(args.steps):
        _busy(slow)
        x = torch.randn(6, 16)
        loss = F.cross_entropy(model(x), torch.randint(0, 4, (6,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()
    print(f"rank {dist.get_rank() if dist.is_initialized() else 'done'} finished", flush=True)


if __name__ == "__main__":
    main()
