"""Sample job, baseline: a small ResNet-style image classifier written the usual, slow way.

What the profiler should find here: plain 3x3 convolutions everywhere (most of the FLOPs),
a DataLoader with ``num_workers=0`` and a heavy per-sample augmentation on the training
thread, fp32, and an evaluation loop that builds autograd graphs (no ``torch.no_grad()``).
Plain argparse + PyTorch; knows nothing about Torchscope. Synthetic seeded data, CPU, no downloads.

    python sample_models/resnet_baseline.py --steps 30 --batch-size 32
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

try:
    from sample_models.data import HeavyAugmentDataset, make_images
except ImportError:  # run as a script: python sample_models/resnet_baseline.py
    from data import HeavyAugmentDataset, make_images  # type: ignore[no-redef]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.layer3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40, help="stop after this many training steps (0: no limit)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--train-size", type=int, default=1024)
    p.add_argument("--val-size", type=int, default=256)
    p.add_argument("--eval-every", type=int, default=20, help="evaluate every N steps (0: at epoch ends only)")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="intra-op CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    # Tests only: raise at this step. SUPPRESS keeps it out of the namespace (and the run's config).
    p.add_argument("--fail-at-step", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def evaluate(model: nn.Module, loader: DataLoader, criterion: nn.Module) -> tuple[float, float]:
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    for x, y in loader:  # no torch.no_grad(): every batch builds a graph nobody uses
        out = model(x)
        loss_sum += criterion(out, y).item()
        correct += (out.argmax(1) == y).sum().item()
        total += len(y)
    model.train()
    return loss_sum / total, correct / total


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    images, labels = make_images(args.train_size + args.val_size, classes=10, size=args.image_size, seed=args.seed)
    train = HeavyAugmentDataset(images[: args.train_size], labels[: args.train_size], seed=args.seed, blur_passes=10)
    val = HeavyAugmentDataset(images[args.train_size:], labels[args.train_size:], seed=args.seed + 1, blur_passes=1)
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    val_loader = DataLoader(val, batch_size=args.batch_size, num_workers=args.num_workers)
    model = SmallResNet(width=args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    criterion = nn.CrossEntropyLoss()
    # A loss module (not F.cross_entropy) in evaluation: `torchscope run` logs its mean as val_loss.
    val_criterion = nn.CrossEntropyLoss(reduction="sum")
    step, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        for x, y in train_loader:
            if step == getattr(args, "fail_at_step", -1):
                raise RuntimeError(f"failing on purpose at step {step} (--fail-at-step)")
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.eval_every and step % args.eval_every == 0:
                val_loss, val_acc = evaluate(model, val_loader, val_criterion)
                print(f"step {step} val_loss {val_loss:.4f} val_acc {val_acc:.3f}", flush=True)
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    val_loss, val_acc = evaluate(model, val_loader, val_criterion)
    elapsed = time.perf_counter() - start
    print(f"done: {step} steps in {elapsed:.1f}s, val_loss {val_loss:.4f} val_acc {val_acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
