"""The checkpoint directory on disk: committing a checkpoint file and its record, keep-last-K
(and the best by one metric), finding the newest whole checkpoint, and clearing what killed attempts left behind.

These functions take the directory and the attempt explicitly and know nothing of the job's
environment; :mod:`trainyard.job` (which documents the file layout) ties them to the run.
Standard library only, like the rest of the in-job SDK.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from trainyard._encoding import MetricValue, decode_number, dumps

CHECKPOINTS_FILE = "checkpoints.jsonl"

CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")
TEMP_NAME = re.compile(r"^\.ckpt-\d{10}\.a(\d+)\.[0-9a-f]+\.tmp$")
_HASH_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: its file exists and its sha256 matches its record."""

    path: str
    step: int
    sha256: str
    size: int
    metrics: dict[str, float | int]
    attempt: int | None = None
    time: float | None = None


def file_name(step: int) -> str:
    return f"ckpt-{step:010d}.pt"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def remove_stale_temps(directory: Path, attempt: int) -> None:
    # A temp file left by an earlier attempt of this run was killed mid-save: nobody will
    # ever finish it. Temps of this attempt (or a later one) are left alone.
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        match = TEMP_NAME.match(entry.name)
        if match and int(match.group(1)) < attempt:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


@contextlib.contextmanager
def commit(directory: Path, step: int, *, attempt: int, metrics: Mapping[str, MetricValue]) -> Iterator[str]:
    """Yields a temp file's path to write; on a clean exit makes it ``ckpt-{step}.pt`` and records it.

    The record is appended (and fsync'd) only once the file is whole, fsync'd and renamed into
    place and the directory fsync'd. If the block raises, the temp file is removed and nothing
    is recorded.
    """
    final_name = file_name(step)
    temp = directory / f".ckpt-{step:010d}.a{attempt}.{secrets.token_hex(6)}.tmp"
    temp.touch(exist_ok=False)
    try:
        yield str(temp)
        if not temp.is_file():
            raise RuntimeError(f"checkpoint {final_name}: nothing was written to {temp}")
        size = temp.stat().st_size
        if size == 0:
            raise RuntimeError(f"checkpoint {final_name}: the file written is empty")
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, directory / final_name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_dir(directory)
    sha256, size = sha256_of(directory / final_name)
    record = {
        "step": step,
        "file": final_name,
        "size": size,
        "sha256": sha256,
        "metrics": dict(metrics),
        "time": time.time(),
        "attempt": attempt,
    }
    index = directory / CHECKPOINTS_FILE
    with open(index, "a", encoding="utf-8") as fh:
        fh.write(dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(directory)


def read_records(directory: Path) -> list[dict[str, Any]]:
    """Well-formed records of ``checkpoints.jsonl``, oldest first; torn or bad lines skipped."""
    try:
        text = (directory / CHECKPOINTS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        name = record.get("file")
        if not isinstance(name, str) or not CHECKPOINT_NAME.match(name):
            continue
        if not isinstance(record.get("sha256"), str):
            continue
        if not all(isinstance(record.get(k), int) and not isinstance(record.get(k), bool) for k in ("step", "size")):
            continue
        records.append(record)
    return records


def best_record(records: list[dict[str, Any]], directory: Path, best: tuple[str, str]) -> str | None:
    """The file of the recorded checkpoint with the best value of ``best = (metric, "min"|"max")``
    whose file still exists; the latest of equals; None if none carries the metric."""
    metric, mode = best
    chosen: tuple[float, str] | None = None
    for record in records:
        metrics = record.get("metrics")
        value = decode_number(metrics.get(metric)) if isinstance(metrics, dict) else None
        if value is None or value != value or not (directory / record["file"]).is_file():  # NaN is never best
            continue
        score = float(value) if mode == "max" else -float(value)
        if chosen is None or score >= chosen[0]:
            chosen = (score, record["file"])
    return chosen[1] if chosen else None


def enforce_keep(directory: Path, *, keep: int, just_written: str, on_deleted: Callable[[str, int], None],
                 best: tuple[str, str] | None = None) -> None:
    """Deletes every ``ckpt-*.pt`` but the ``keep`` most recently recorded ones (never
    ``just_written``) and, with ``best``, the one with the best value of that metric, calling
    ``on_deleted(file, step)`` after each deletion."""
    records = read_records(directory)
    # The K most recently recorded files that still exist; record order, not step order, so a
    # step rewritten by a later attempt counts as new.
    kept: list[str] = [just_written]
    for record in reversed(records):
        if len(kept) >= keep:
            break
        name = record["file"]
        if name not in kept and (directory / name).is_file():
            kept.append(name)
    keep_set = set(kept)
    if best is not None and (best_file := best_record(records, directory, best)) is not None:
        keep_set.add(best_file)
    for entry in os.scandir(directory):
        match = CHECKPOINT_NAME.match(entry.name)
        if not match or entry.name in keep_set:
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        on_deleted(entry.name, int(match.group(1)))


def find_latest(directory: Path) -> Checkpoint | None:
    """The newest recorded checkpoint whose file exists and matches its sha256, or None."""
    for record in reversed(read_records(directory)):
        path = directory / record["file"]
        try:
            if path.stat().st_size != record["size"]:
                continue
            sha256, _ = sha256_of(path)
        except FileNotFoundError:
            continue
        if sha256 != record["sha256"]:
            continue
        raw_metrics = record.get("metrics")
        metrics: dict[str, float | int] = {}
        if isinstance(raw_metrics, dict):
            for key, value in raw_metrics.items():
                number = decode_number(value)
                if number is not None:
                    metrics[key] = number
        raw_attempt = record.get("attempt")
        raw_time = record.get("time")
        return Checkpoint(
            path=str(path),
            step=record["step"],
            sha256=sha256,
            size=record["size"],
            metrics=metrics,
            attempt=raw_attempt if isinstance(raw_attempt, int) else None,
            time=float(raw_time) if isinstance(raw_time, int | float) else None,
        )
    return None
