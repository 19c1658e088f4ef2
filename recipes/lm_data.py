"""lm_pretrain's corpus: the installed Python standard library's source, read as bytes.

Every machine with Python has it, so nothing is downloaded. ``corpus`` picks a slice: the
top-level modules (``stdlib-top``), the packages' modules (``stdlib-packages``: a different
slice to fine-tune on), or both. Files are listed sorted by relative path (``site-packages``,
test suites and ``__pycache__`` left out); every tenth file is validation, the rest training;
files are joined with a NUL byte. The tokenizer is byte-level: token = byte, vocabulary 256,
nothing to learn, so it is the same everywhere and saved with checkpoints as its description.

Batches. Step ``g``'s global batch is ``batch_size`` windows of ``context + 1`` bytes at offsets
drawn from a generator seeded with ``(seed, g)``: a resumed attempt computes the same batches
without replaying anything. Rank ``r`` takes the ``r``-th slice. Validation uses fixed windows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import torch

CORPORA = ("stdlib-top", "stdlib-packages", "stdlib-all")
VAL_EVERY = 10  # every tenth file is validation
EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
TOKENIZER: dict[str, Any] = {"kind": "bytes", "vocab_size": 256, "merges": [], "document_separator": 0}
EVAL_SEED = 1234


def corpus_files(corpus: str, root: Path | None = None) -> list[Path]:
    base = root or Path(sysconfig.get_paths()["stdlib"])
    if corpus == "stdlib-top":
        files = [p for p in base.glob("*.py") if p.is_file()]
    else:
        files = [p for p in base.rglob("*.py") if p.is_file() and not EXCLUDED_DIRS & set(p.relative_to(base).parts[:-1])]
        if corpus == "stdlib-packages":
            files = [p for p in files if len(p.relative_to(base).parts) > 1]
    return sorted(files, key=lambda p: p.relative_to(base).as_posix())


def encode(text: bytes) -> np.ndarray:
    return np.frombuffer(text, dtype=np.uint8).astype(np.int64)


def decode(tokens: np.ndarray | list[int]) -> bytes:
    return bytes(int(t) for t in tokens)


@dataclasses.dataclass(frozen=True)
class Corpus:
    name: str
    train: torch.Tensor  # int64 token ids
    val: torch.Tensor
    corpus_sha256: str
    split_sha256: str
    files: int
    val_files: int

    def lineage(self) -> dict[str, Any]:
        return {
            "dataset": f"python standard library source ({self.name})",
            "corpus": self.name,
            "corpus_sha256": self.corpus_sha256,
            "corpus_files": self.files,
            "split": f"every {VAL_EVERY}th file (sorted by path) is validation",
            "split_sha256": self.split_sha256,
            "val_files": self.val_files,
            "train_tokens": int(self.train.numel()),
            "val_tokens": int(self.val.numel()),
            "tokenizer": dict(TOKENIZER),
        }


def load_corpus(corpus: str, root: Path | None = None) -> Corpus:
    files = corpus_files(corpus, root)
    if len(files) < VAL_EVERY:
        raise RuntimeError(f"corpus {corpus} has only {len(files)} files")
    base = root or Path(sysconfig.get_paths()["stdlib"])
    digest, split_digest = hashlib.sha256(), hashlib.sha256()
    train_parts: list[bytes] = []
    val_parts: list[bytes] = []
    for index, path in enumerate(files):
        data = path.read_bytes()
        name = path.relative_to(base).as_posix().encode()
        digest.update(name + b"\0" + hashlib.sha256(data).digest())
        is_val = index % VAL_EVERY == VAL_EVERY - 1
        split_digest.update(name + (b"\0val\n" if is_val else b"\0train\n"))
        (val_parts if is_val else train_parts).append(data)
    sep = bytes([TOKENIZER["document_separator"]])
    return Corpus(
        name=corpus,
        train=torch.from_numpy(encode(sep.join(train_parts))),
        val=torch.from_numpy(encode(sep.join(val_parts))),
        corpus_sha256=digest.hexdigest(),
        split_sha256=split_digest.hexdigest(),
        files=len(files),
        val_files=len(val_parts),
    )


def window_offsets(seed: int, step_index: int, count: int, n_tokens: int, span: int) -> np.ndarray:
    rng = np.random.default_rng([seed, step_index])
    return rng.integers(0, n_tokens - span, size=count)


def windows(tokens: torch.Tensor, offsets: np.ndarray, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (len(offsets), context): targets are inputs shifted by one."""
    index = (torch.from_numpy(offsets).unsqueeze(1) + torch.arange(context + 1)).to(tokens.device)
    rows = tokens[index]
    return rows[:, :-1], rows[:, 1:]
