"""Artifacts a job logs: each file is copied into ``<run dir>/artifacts/<name>`` (so the job may
change or delete its own copy at once) and recorded in ``<run dir>/artifacts.jsonl``, which the
node agent ships; outside the portal the local sink folder keeps them the same way.

Standard library only, like the rest of the in-job SDK.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
import time
from pathlib import Path

from trainyard._encoding import dumps

ARTIFACTS_DIR = "artifacts"
ARTIFACTS_FILE = "artifacts.jsonl"
NAME_MAX_CHARS = 500
_CHUNK = 1 << 20
_lock = threading.Lock()


def check_name(name: str) -> str:
    """The server's rules for an artifact name (a relative path inside the run); ValueError otherwise."""
    if not isinstance(name, str) or not name:
        raise ValueError("artifact name must be a non-empty relative path such as plots/loss.png")
    if len(name) > NAME_MAX_CHARS:
        raise ValueError(f"artifact name must be at most {NAME_MAX_CHARS} characters (got {len(name)})")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError(f"artifact name {name!r} must not contain control characters")
    if name.startswith("/") or "\\" in name:
        raise ValueError(f"artifact name {name!r} must be a relative path with / between folders")
    parts = name.split("/")
    if ".." in parts or any(part in ("", ".") for part in parts):
        raise ValueError(f"artifact name {name!r} must not contain '..', '.' or empty path segments")
    return name


def plan(source: Path, name: str | None) -> list[tuple[Path, str]]:
    """(file, artifact name) pairs: one for a file; for a folder every regular file under it, its
    relative layout kept under ``name`` (the folder's own name by default)."""
    if source.is_file():
        return [(source, check_name(name if name is not None else source.name))]
    if not source.is_dir():
        raise FileNotFoundError(f"log_artifact: no such file or folder: {source}")
    base = check_name(name if name is not None else source.resolve().name)
    pairs: list[tuple[Path, str]] = []
    for folder, dirs, files in os.walk(source):  # links to folders are not followed
        dirs.sort()
        for file in sorted(files):
            path = Path(folder) / file
            if path.is_file():
                rel = path.relative_to(source).as_posix()
                pairs.append((path, check_name(f"{base}/{rel}")))
    return pairs


def store(run_dir: Path, source: Path, name: str) -> dict[str, object]:
    """Copy ``source`` to ``<run_dir>/artifacts/<name>`` (whole or not at all), then record it."""
    root = run_dir / ARTIFACTS_DIR
    dest = root / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    temp = dest.parent / f".{dest.name}.{secrets.token_hex(6)}.tmp"
    digest = hashlib.sha256()
    size = 0
    try:
        with open(source, "rb") as src, open(temp, "xb") as out:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    record: dict[str, object] = {"name": name, "file": f"{ARTIFACTS_DIR}/{name}", "size": size, "sha256": digest.hexdigest(),
                                 "time": time.time()}
    with _lock, open(run_dir / ARTIFACTS_FILE, "a", encoding="utf-8") as fh:
        fh.write(dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return record
