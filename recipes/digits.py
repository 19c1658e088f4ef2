"""The digits data set and the models the recipes train on it.

Data. scikit-learn's ``load_digits`` (1,797 8x8 images, shipped with scikit-learn; read by
``read_digits``, which skips importing scikit-learn), split
70/15/15 per class with a fixed seed (``SPLIT_SEED``), independent of the run's ``seed``, so
that every run, fine-tune and evaluation agree on which images are held out. Pixels are scaled
to [0, 1] and standardised with the statistics of the full 10-class train split, so a model
pre-trained on some classes sees the same inputs when fine-tuned or evaluated on others. The
``seed`` param drives initialisation, dropout and the data order.

Data order. ``batch_size`` is the global batch of one optimizer step. The order of epoch ``e``
is a permutation from a generator seeded with ``(seed, e)``; step ``g`` (0-based) takes batch
``g mod B`` of epoch ``g div B`` (``B`` = full batches per epoch; the last partial batch is
dropped). So a resumed attempt jumps straight to the next batch, skipping those already done,
and sees exactly the data an uninterrupted run would. Under DDP each rank takes the disjoint
``rank``-th slice of every global batch; each rank splits its slice into ``grad_accum``
micro-batches. The maths of a step does not depend on ``grad_accum`` or the world size, up to
rounding.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipes.schema import ParamError

SPLIT_SEED = 0
SPLIT_FRACTIONS = (0.70, 0.15, 0.15)  # train, val, test
NUM_CLASSES = 10


# --- data ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (n, 64) float32, normalised
    y: torch.Tensor  # (n,) int64

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclasses.dataclass(frozen=True)
class DigitsData:
    train: Split
    val: Split
    test: Split
    classes: tuple[int, ...]
    dataset_sha256: str
    split_sha256: str

    def split(self, name: str) -> Split:
        return {"train": self.train, "val": self.val, "test": self.test}[name]

    def lineage(self) -> dict[str, Any]:
        return {
            "dataset": "sklearn.datasets.load_digits",
            "dataset_sha256": self.dataset_sha256,
            "split_seed": SPLIT_SEED,
            "split_fractions": list(SPLIT_FRACTIONS),
            "split_sha256": self.split_sha256,
            "classes": list(self.classes),
            "train_samples": len(self.train),
            "val_samples": len(self.val),
            "test_samples": len(self.test),
        }


def _stratified_split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SPLIT_SEED)
    train, val, test = [], [], []
    for cls in range(NUM_CLASSES):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_val = round(len(members) * SPLIT_FRACTIONS[1])
        n_test = round(len(members) * SPLIT_FRACTIONS[2])
        test.append(members[:n_test])
        val.append(members[n_test : n_test + n_val])
        train.append(members[n_test + n_val :])
    return (
        np.sort(np.concatenate(train)),
        np.sort(np.concatenate(val)),
        np.sort(np.concatenate(test)),
    )


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (1797x64 float64 pixels, 1797 int64 labels).

    Exactly what ``sklearn.datasets.load_digits()`` returns (a test checks it), read straight
    from the ``digits.csv.gz`` scikit-learn ships, as load_digits itself does: importing
    scikit-learn costs 1-4 s per process, more than training a recipe, and every rank and
    attempt pays it. Falls back to load_digits if the file is not where it used to be.
    """
    spec = importlib.util.find_spec("sklearn")
    locations = spec.submodule_search_locations if spec is not None else None
    if locations:
        path = os.path.join(next(iter(locations)), "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            with gzip.open(path, mode="rt", encoding="utf-8") as fh:
                table = np.loadtxt(fh, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int, copy=False)
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]  # slow; file moved

    x, y = load_digits(return_X_y=True)
    return np.asarray(x), np.asarray(y)


def load_digits_data(classes: Sequence[int], device: torch.device) -> DigitsData:
    """The digits data restricted to ``classes``, normalised, on ``device``."""
    pixels, labels = read_digits()
    raw_x = np.ascontiguousarray(pixels, dtype="<f8")
    raw_y = np.ascontiguousarray(labels, dtype="<i8")
    dataset_hash = hashlib.sha256(b"sklearn.datasets.load_digits\0")
    dataset_hash.update(str(raw_x.shape).encode())
    dataset_hash.update(raw_x.tobytes())
    dataset_hash.update(raw_y.tobytes())

    train_idx, val_idx, test_idx = _stratified_split(raw_y)
    scaled = raw_x / 16.0
    mean = scaled[train_idx].mean(axis=0)
    std = np.maximum(scaled[train_idx].std(axis=0), 1e-6)  # border pixels are always 0
    normalised = ((scaled - mean) / std).astype(np.float32)

    wanted = np.asarray(sorted(set(classes)), dtype=np.int64)
    split_hash = hashlib.sha256(f"split_seed={SPLIT_SEED};classes={wanted.tolist()}".encode())

    def take(indices: np.ndarray) -> Split:
        chosen = indices[np.isin(raw_y[indices], wanted)]
        split_hash.update(np.ascontiguousarray(chosen, dtype="<i8").tobytes())
        return Split(
            x=torch.from_numpy(normalised[chosen]).to(device),
            y=torch.from_numpy(raw_y[chosen].astype(np.int64)).to(device),
        )

    train, val, test = take(train_idx), take(val_idx), take(test_idx)
    return DigitsData(
        train=train,
        val=val,
        test=test,
        classes=tuple(int(c) for c in wanted),
        dataset_sha256=dataset_hash.hexdigest(),
        split_sha256=split_hash.hexdigest(),
    )


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order of the training samples in ``epoch``: a permutation seeded with (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


class BatchPlan:
    """Which sample indices global step ``g`` (0-based) uses, resumable at any step."""

    def __init__(self, *, seed: int, n_samples: int, batch_size: int) -> None:
        if batch_size > n_samples:
            raise ParamError(f"batch_size {batch_size} exceeds the {n_samples} training samples of the chosen classes")
        self.seed = seed
        self.batch_size = batch_size
        self.n_samples = n_samples
        self.batches_per_epoch = n_samples // batch_size
        self._epoch = -1
        self._order = np.empty(0, dtype=np.int64)

    def position(self, step_index: int) -> tuple[int, int]:
        """(epoch, batch within the epoch) of global step ``step_index``."""
        return divmod(step_index, self.batches_per_epoch)

    def global_batch(self, step_index: int) -> np.ndarray:
        epoch, batch = self.position(step_index)
        if epoch != self._epoch:
            self._order = epoch_order(self.seed, epoch, self.n_samples)
            self._epoch = epoch
        return self._order[batch * self.batch_size : (batch + 1) * self.batch_size]


# --- models --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    arch: str = "mlp"
    hidden: int = 128
    dropout: float = 0.1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        return cls(arch=str(data["arch"]), hidden=int(data["hidden"]), dropout=float(data["dropout"]))


class DigitsMLP(nn.Module):
    """64 -> hidden -> hidden -> 10, ReLU and dropout between."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, config.hidden)
        self.fc2 = nn.Linear(config.hidden, config.hidden)
        self.head = nn.Linear(config.hidden, NUM_CLASSES)
        self.drop = nn.Dropout(config.dropout)

    @property
    def layers(self) -> list[nn.Module]:
        return [self.fc1, self.fc2, self.head]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(F.relu(self.fc1(x)))
        x = self.drop(F.relu(self.fc2(x)))
        return self.head(x)  # type: ignore[no-any-return]


class DigitsCNN(nn.Module):
    """Two 3x3 conv + max-pool blocks on the 8x8 image, then hidden -> 10."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, config.hidden)
        self.head = nn.Linear(config.hidden, NUM_CLASSES)
        self.drop = nn.Dropout(config.dropout)

    @property
    def layers(self) -> list[nn.Module]:
        return [self.conv1, self.conv2, self.fc, self.head]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 1, 8, 8)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc(x.flatten(1))))
        return self.head(x)  # type: ignore[no-any-return]


DigitsModel = DigitsMLP | DigitsCNN


def build_model(config: ModelConfig) -> DigitsModel:
    if config.arch == "mlp":
        return DigitsMLP(config)
    if config.arch == "cnn":
        return DigitsCNN(config)
    raise ParamError(f"unknown arch {config.arch!r}")


def freeze_leading_layers(model: DigitsModel, count: int) -> None:
    """Freeze the first ``count`` parameterised layers (at least one layer stays trainable)."""
    layers = model.layers
    if count >= len(layers):
        raise ParamError(
            f"freeze={count} would freeze every layer: a {type(model).__name__} has"
            f" {len(layers)} layers, so freeze must be at most {len(layers) - 1}"
        )
    for layer in layers[:count]:
        layer.requires_grad_(False)
