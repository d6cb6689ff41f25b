"""Sample variant, input pipeline: per-item CPU augmentation on the training thread, or in workers.

One flag turns the problem on and off: ``--workers 0`` (the problem: every batch is augmented on
the training thread, between optimizer steps) or ``--workers 2`` (the fix: worker processes
prepare the next batches while the model trains). ``--pin-memory`` pins the batches, which only
matters when they are copied to a GPU afterwards; on a CPU-only job it changes nothing.
Plain argparse + PyTorch; knows nothing about Torchscope. Synthetic seeded data, CPU, seconds.

    python sample_models/variants/dataloader_workers.py --workers 0
    python sample_models/variants/dataloader_workers.py --workers 2 --pin-memory
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

try:
    from sample_models.data import HeavyAugmentDataset, make_images
except ImportError:  # run as a script: python sample_models/variants/dataloader_workers.py
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from data import HeavyAugmentDataset, make_images  # type: ignore[no-redef]


def make_model(size: int, classes: int) -> nn.Module:
    """An MLP whose step costs a few times one batch's augmentation on one core."""
    width = 1536
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * size * size, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (0 = the problem)")
    p.add_argument("--pin-memory", action="store_true", help="DataLoader pin_memory (no effect without a GPU)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=16, help="image side in pixels")
    p.add_argument("--blur-passes", type=int, default=3, help="per-item augmentation work")
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core for the model, so the comparison does not depend on the machine's
    classes = 10
    images, labels = make_images(args.batch_size * args.steps, classes=classes, size=args.size, seed=0)
    data = HeavyAugmentDataset(images, labels, seed=1, blur_passes=args.blur_passes)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        pin_memory=args.pin_memory and torch.cuda.is_available(),
                        persistent_workers=args.workers > 0, prefetch_factor=4 if args.workers > 0 else None)
    model = make_model(args.size, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model.train()
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
