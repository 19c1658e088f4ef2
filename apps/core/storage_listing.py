"""What the object store (apps.core.storage) holds under a prefix: key, size and last change of
each object, for sweeps that compare the store with the rows that point into it
(apps.runs.services.storage_orphans). Both stores: the local folder and S3."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from apps.core.storage import LocalStore, S3Store, Store


@dataclass(frozen=True)
class StoredObject:
    key: str  # as the store's other calls take it (without the S3 store's configured prefix)
    size: int
    modified: datetime  # aware, UTC


def store_objects(objects: Store, *, prefix: str) -> Iterator[StoredObject]:
    """Every object whose key starts with `prefix` (a folder such as "checkpoints/"), in no set order."""
    if isinstance(objects, LocalStore):
        yield from _local_objects(objects, prefix)
    elif isinstance(objects, S3Store):
        yield from _s3_objects(objects, prefix)
    else:
        raise TypeError(f"cannot list the objects of a {type(objects).__name__}")


def _local_objects(objects: LocalStore, prefix: str) -> Iterator[StoredObject]:
    root = objects.root.resolve()
    top = (root / prefix).resolve()
    if root not in top.parents or not top.is_dir():
        return
    for folder, _dirs, files in os.walk(top):
        for name in files:
            path = Path(folder) / name
            try:
                stat = path.lstat()
            except FileNotFoundError:
                continue  # deleted while we walked
            if not path.is_file() or path.is_symlink():
                continue
            yield StoredObject(key=path.relative_to(root).as_posix(), size=stat.st_size,
                               modified=datetime.fromtimestamp(stat.st_mtime, tz=UTC))


def _s3_objects(objects: S3Store, prefix: str) -> Iterator[StoredObject]:
    paginator = objects.client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=objects.bucket, Prefix=objects.prefix + prefix):
        for item in page.get("Contents", []):
            key = str(item["Key"])[len(objects.prefix):]
            modified = item["LastModified"]
            if modified.tzinfo is None:
                modified = modified.replace(tzinfo=UTC)
            yield StoredObject(key=key, size=int(item["Size"]), modified=modified)
