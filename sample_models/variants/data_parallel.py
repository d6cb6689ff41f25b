"""Sample variant, distribution: one process with nn.DataParallel, or DistributedDataParallel over
processes (gloo on CPU, ``torchrun --nproc_per_node 2``).

One flag turns the problem on and off: ``--parallel dp`` (the problem: ``nn.DataParallel``, one
process that replicates the model on every step; without a GPU it has no device to replicate to
and simply calls the module) or ``--parallel ddp`` under torchrun (the fix: one process per
worker, each with its share of the global batch, gradients all-reduced by DDP).
Plain argparse + PyTorch; knows nothing about Torchscope. Synthetic seeded data, CPU, seconds.

    python sample_models/variants/data_parallel.py --parallel dp
    torchrun --standalone --nproc_per_node 2 sample_models/variants/data_parallel.py --parallel ddp
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parallel", choices=("dp", "ddp"), default="dp")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=64, help="global batch (split over the DDP processes)")
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    torch.set_num_threads(1)
    world, rank = 1, 0
    if args.parallel == "ddp":
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model: nn.Module = make_model()
    if args.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        model = nn.DataParallel(model)  # no GPU: no device_ids, forward calls the module itself
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    per_rank = args.batch_size // world
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 64, generator=g)
        y = torch.randint(0, 10, (args.batch_size,), generator=g)
        xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        loss = F.cross_entropy(model(xs), ys)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 5 == 0 and rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if args.parallel == "ddp":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
