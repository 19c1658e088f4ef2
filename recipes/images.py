"""image_classifier's data and model: generated shapes and a small ResNet.

Data. Eight classes of 32x32 RGB images drawn from a generator seeded with ``DATA_SEED``
(never the run's seed): disk, ring, square, square outline, horizontal bars, vertical bars,
plus, diagonal cross; each with a random centre, size and colour on a noisy background. The
same on every machine, nothing downloaded; the pixels' sha256 is in lineage.

Model. A ResNet-style CNN: a 3x3 stem, ``stages`` stages of basic residual blocks (width
doubling and stride 2 from the second), global average pooling, a linear head. GroupNorm
rather than BatchNorm: a sample's output does not depend on the rest of its micro-batch, so
the maths does not change with the world size or grad_accum (BatchNorm's would).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DATA_SEED = 31
IMAGE_SIZE = 32
CLASSES = ("disk", "ring", "square", "square-outline", "h-bars", "v-bars", "plus", "cross")


_GRID = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32)


def _draw(kind: int, cx: float, cy: float, r: float) -> np.ndarray:
    yy, xx = _GRID
    dx, dy = xx - cx, yy - cy
    if kind < 2:
        dist = np.sqrt(dx**2 + dy**2)
        mask = (dist <= r) if kind == 0 else (dist <= r) & (dist >= r * 0.6)
        return mask.astype(np.float32)
    box = np.maximum(np.abs(dx), np.abs(dy))
    inside = box <= r
    if kind == 2:
        mask = inside
    elif kind == 3:
        mask = inside & (box >= r * 0.65)
    elif kind == 4:
        mask = inside & ((yy // 3) % 2 == 0)
    elif kind == 5:
        mask = inside & ((xx // 3) % 2 == 0)
    elif kind == 6:
        mask = inside & ((np.abs(dx) <= r * 0.25) | (np.abs(dy) <= r * 0.25))
    else:
        mask = inside & ((np.abs(dx - dy) <= r * 0.3) | (np.abs(dx + dy) <= r * 0.3))
    return mask.astype(np.float32)


def generate(count: int, *, seed: int = DATA_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(images (count, 3, 32, 32) float32, labels (count,) int64), class-balanced."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % len(CLASSES)
    rng.shuffle(labels)
    images = rng.normal(0.0, 0.15, size=(count, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    for i, kind in enumerate(labels):
        cx, cy = rng.uniform(10, 22, size=2)
        r = rng.uniform(5, 9)
        colour = rng.uniform(0.4, 1.0, size=3).astype(np.float32)
        images[i] += colour[:, None, None] * _draw(int(kind), cx, cy, r)[None]
    return images, labels.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class ImageData:
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    sha256: str

    def lineage(self) -> dict[str, Any]:
        return {"dataset": "generated shapes (recipes.images)", "data_seed": DATA_SEED, "dataset_sha256": self.sha256,
                "classes": list(CLASSES), "image_size": IMAGE_SIZE, "train_samples": len(self.train_y),
                "val_samples": len(self.val_y)}


def load_images(train_samples: int, val_samples: int) -> ImageData:
    x, y = generate(train_samples + val_samples)
    digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    return ImageData(tx[:train_samples], ty[:train_samples], tx[train_samples:], ty[train_samples:], digest)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels), channels)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.n1 = _norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.n2 = _norm(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), _norm(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.n1(self.conv1(x)))
        return F.relu(self.n2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, width: int, stages: int, blocks: int, num_classes: int = len(CLASSES)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), _norm(width), nn.ReLU())
        layers: list[nn.Module] = []
        cin = width
        for s in range(stages):
            cout = width * 2**s
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if s > 0 and b == 0 else 1))
                cin = cout
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean(dim=(2, 3)))


def training_flops_per_sample(model: nn.Module) -> float:
    """3 x the forward FLOPs of one image (backward is about twice the forward), counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    probe = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE, device=next(model.parameters()).device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(probe)
    return 3.0 * counter.get_total_flops()
