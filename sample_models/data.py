"""Synthetic, seeded image-classification data for the sample models (no downloads).

Each class has a fixed random colour template; an image is its class template plus noise, so
a small CNN learns it in a few hundred steps and loss curves look like real ones.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

__all__ = ["make_images", "HeavyAugmentDataset", "TensorPairDataset", "light_augment_batch"]


def make_images(n: int, *, classes: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``n`` images (n, 3, size, size) in [0, 1] and their labels, deterministically."""
    g = torch.Generator().manual_seed(seed)
    # Low-frequency templates (upsampled 4x4 noise) are easy to tell apart, hard to memorise.
    templates = F.interpolate(torch.rand(classes, 3, 4, 4, generator=g), size=(size, size),
                              mode="bilinear", align_corners=False)
    labels = torch.randint(0, classes, (n,), generator=g)
    noise = torch.rand(n, 3, size, size, generator=g)
    images = (0.6 * templates[labels] + 0.4 * noise).clamp(0, 1)
    return images, labels


class HeavyAugmentDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Per-sample augmentation done the slow way: rotation by resampling, repeated blur, jitter."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, *, seed: int, blur_passes: int = 6) -> None:
        self.images = images
        self.labels = labels
        self.seed = seed
        self.blur_passes = blur_passes
        k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        kernel = torch.outer(k, k) / 256.0
        self.kernel = kernel.expand(3, 1, 5, 5).contiguous()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        img = self.images[index].unsqueeze(0)
        angle = (torch.rand((), generator=g).item() - 0.5) * math.pi / 6
        cos, sin = math.cos(angle), math.sin(angle)
        theta = torch.tensor([[[cos, -sin, 0.0], [sin, cos, 0.0]]])
        grid = F.affine_grid(theta, list(img.shape), align_corners=False)
        img = F.grid_sample(img, grid, align_corners=False, padding_mode="reflection")
        for _ in range(self.blur_passes):
            img = F.conv2d(F.pad(img, (2, 2, 2, 2), mode="reflect"), self.kernel, groups=3)
        jitter = 1.0 + 0.2 * (torch.rand(1, 3, 1, 1, generator=g) - 0.5)
        img = (img * jitter).clamp(0, 1)
        img = (img - 0.5) / 0.25
        return img.squeeze(0), self.labels[index]


class TensorPairDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images already normalised once up front: __getitem__ is an index."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = ((images - 0.5) / 0.25).contiguous()
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def light_augment_batch(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Cheap whole-batch augmentation: random horizontal flips and a small random shift."""
    flip = torch.rand(images.shape[0], generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    dx, dy = (int(v) for v in torch.randint(-2, 3, (2,), generator=generator))
    return torch.roll(images, shifts=(dy, dx), dims=(-2, -1))
