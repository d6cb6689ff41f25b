"""A hand-written DistributedDataParallel loop on CPU (gloo): a functional loss, no nn.Sequential, and
a DataLoader whose reads are slow on one rank (``--slow-rank``: each sample sleeps ``--delay-ms``).
Knows nothing of Torchscope; the other ranks wait for the slow one inside DDP's all-reduce."""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow disk or decoder: waiting, not computing
        return torch.randn(32, generator=torch.Generator().manual_seed(i)), i % 4


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(32, 64) * 0.1)
        self.w2 = torch.nn.Parameter(torch.randn(64, 4) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x @ self.w1) @ self.w2


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=8.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = DataLoader(Samples(10_000, args.delay_ms / 1e3 if rank == args.slow_rank else 0.0), batch_size=4)
    batches = iter(data)
    for _ in range(args.steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
