"""Object storage for large files (checkpoints, code snapshots): an S3-compatible bucket, or the
local MEDIA_ROOT folder by default. Agents move the bytes to and from the store themselves with
presigned URLs; web hosts only sign URLs and check what arrived.

The local store answers its "presigned" URLs itself (apps.core.storage_views), signed with
Django's signing and an expiry, so `make run` needs no S3 server; those URLs are relative to
the web server the agent already talks to.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core import signing
from django.urls import reverse

from agents import protocol

MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part (all but the last)
MAX_PARTS = 10_000  # S3's most parts in one upload
CHUNK = 1 << 20
SIGNING_SALT = "trainyard.storage.v1"


class ObjectMissing(Exception):
    """No object under the key (never stored, or deleted)."""


@dataclass(frozen=True)
class UploadPart:
    number: int
    url: str
    offset: int
    size: int


@dataclass(frozen=True)
class UploadPlan:
    """How to put `size` bytes under `key`: one PUT (upload_id "") or parts then a complete step."""

    key: str
    size: int
    upload_id: str
    parts: tuple[UploadPart, ...]

    def message(self) -> protocol.UploadPlan:
        return {"upload_id": self.upload_id, "size": self.size,
                "parts": [{"number": p.number, "url": p.url, "offset": p.offset, "size": p.size} for p in self.parts]}


@dataclass(frozen=True)
class StoredObject:
    """One object a listing found (Store.objects): for sweeps that compare the store with the rows
    that point into it (apps.runs.services.storage_orphans)."""

    key: str  # as the store's other calls take it (without the S3 store's configured prefix)
    size: int
    modified: datetime  # aware, UTC


class Store(Protocol):
    # True when presigned URLs point at another server (S3): the web redirects instead of serving bytes.
    direct: bool

    def put(self, key: str, fileobj: IO[bytes]) -> None: ...
    def get(self, key: str) -> IO[bytes]: ...
    def delete(self, key: str) -> None: ...
    def size(self, key: str) -> int | None: ...
    def presigned_put(self, key: str, size: int) -> UploadPlan: ...
    def complete(self, key: str, upload_id: str, parts: list[tuple[int, str]]) -> None: ...
    def abort(self, key: str, upload_id: str) -> None: ...
    # content_type, inline and expires_s shape a direct store's answer; the local store serves
    # through the web, which sets those headers itself (and its URLs last the configured TTL).
    def presigned_get(self, key: str, *, filename: str = "", content_type: str = "", inline: bool = False,
                      expires_s: int = 0) -> str: ...
    # Every object whose key starts with `prefix` (a folder such as "checkpoints/"), in no set order.
    def objects(self, *, prefix: str) -> Iterator[StoredObject]: ...


def part_plan(size: int, part_bytes: int) -> list[tuple[int, int]]:
    """(offset, size) of each part: as few as the part size allows, never over MAX_PARTS."""
    part = max(MIN_PART_BYTES, part_bytes, math.ceil(size / MAX_PARTS))
    return [(offset, min(part, size - offset)) for offset in range(0, size, part)] or [(0, 0)]


# --- the local folder ---------------------------------------------------------------------------
def local_token(*, key: str, method: str, size: int = -1) -> str:
    return signing.dumps({"k": key, "m": method, "n": size}, salt=SIGNING_SALT, compress=True)


def local_token_read(token: str, *, method: str) -> tuple[str, int]:
    """(key, size) of a token signed for `method` that has not expired; BadSignature otherwise."""
    data = signing.loads(token, salt=SIGNING_SALT, max_age=settings.TRAINYARD_STORAGE_URL_TTL_S)
    if not isinstance(data, dict) or data.get("m") != method or not isinstance(data.get("k"), str):
        raise signing.BadSignature("a token for another method")
    return data["k"], int(data.get("n", -1))


class LocalStore:
    direct = False

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        root = self.root.resolve()
        path = (root / key).resolve()
        # Keys are made by the server, but a stored key must never lead out of the folder.
        if root not in path.parents:
            raise ObjectMissing(key)
        return path

    def put(self, key: str, fileobj: IO[bytes]) -> None:
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Written beside, then renamed: a key holds a whole object or none.
        with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp", delete=False) as tmp:
            try:
                while chunk := fileobj.read(CHUNK):
                    tmp.write(chunk)
                tmp.flush()
                os.fsync(tmp.fileno())
            except BaseException:
                Path(tmp.name).unlink(missing_ok=True)
                raise
        os.replace(tmp.name, dest)

    def get(self, key: str) -> IO[bytes]:
        try:
            return open(self.path(key), "rb")
        except (FileNotFoundError, IsADirectoryError) as err:
            raise ObjectMissing(key) from err

    def delete(self, key: str) -> None:
        try:
            self.path(key).unlink(missing_ok=True)
        except ObjectMissing:
            pass

    def size(self, key: str) -> int | None:
        try:
            path = self.path(key)
        except ObjectMissing:
            return None
        return path.stat().st_size if path.is_file() else None

    def presigned_put(self, key: str, size: int) -> UploadPlan:
        # One PUT whatever the size: the bytes land on this host's disk either way.
        url = f"{reverse('storage-object')}?{urlencode({'t': local_token(key=key, method='PUT', size=size)})}"
        return UploadPlan(key=key, size=size, upload_id="", parts=(UploadPart(1, url, 0, size),))

    def complete(self, key: str, upload_id: str, parts: list[tuple[int, str]]) -> None:
        return None  # the PUT already stored it whole

    def abort(self, key: str, upload_id: str) -> None:
        return None

    def presigned_get(self, key: str, *, filename: str = "", content_type: str = "", inline: bool = False,
                      expires_s: int = 0) -> str:
        return f"{reverse('storage-object')}?{urlencode({'t': local_token(key=key, method='GET')})}"

    def objects(self, *, prefix: str) -> Iterator[StoredObject]:
        root = self.root.resolve()
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


# --- S3 ------------------------------------------------------------------------------------------
class S3Store:
    direct = True

    def __init__(self, *, bucket: str, endpoint: str, region: str, access_key: str, secret_key: str, prefix: str,
                 ttl_s: int, part_bytes: int) -> None:
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix, self.ttl_s, self.part_bytes = bucket, prefix, ttl_s, part_bytes
        credentials = {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key} if access_key else {}
        # Path-style addressing for a named endpoint (MinIO, Ceph, moto): no per-bucket DNS names.
        config = Config(signature_version="s3v4", s3={"addressing_style": "path" if endpoint else "auto"},
                        retries={"max_attempts": 5, "mode": "standard"})
        self.client: Any = boto3.client("s3", endpoint_url=endpoint or None, region_name=region, config=config, **credentials)

    def _key(self, key: str) -> str:
        return self.prefix + key

    def put(self, key: str, fileobj: IO[bytes]) -> None:
        self.client.upload_fileobj(fileobj, self.bucket, self._key(key))

    def get(self, key: str) -> IO[bytes]:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise ObjectMissing(key) from err
            raise

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def size(self, key: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def _sign(self, operation: str, *, expires_s: int = 0, **params: Any) -> str:
        return str(self.client.generate_presigned_url(operation, Params={"Bucket": self.bucket, **params},
                                                      ExpiresIn=expires_s or self.ttl_s))

    def presigned_put(self, key: str, size: int) -> UploadPlan:
        full = self._key(key)
        if size <= self.part_bytes:
            return UploadPlan(key=key, size=size, upload_id="", parts=(UploadPart(1, self._sign("put_object", Key=full), 0, size),))
        upload_id = str(self.client.create_multipart_upload(Bucket=self.bucket, Key=full)["UploadId"])
        parts = tuple(UploadPart(n, self._sign("upload_part", Key=full, UploadId=upload_id, PartNumber=n), offset, length)
                      for n, (offset, length) in enumerate(part_plan(size, self.part_bytes), start=1))
        return UploadPlan(key=key, size=size, upload_id=upload_id, parts=parts)

    def complete(self, key: str, upload_id: str, parts: list[tuple[int, str]]) -> None:
        if upload_id:
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in sorted(parts)]})

    def abort(self, key: str, upload_id: str) -> None:
        if upload_id:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(key), UploadId=upload_id)

    def presigned_get(self, key: str, *, filename: str = "", content_type: str = "", inline: bool = False,
                      expires_s: int = 0) -> str:
        # The store answers with the headers the URL names (signed with it, so a client cannot change them).
        extra: dict[str, str] = {}
        if filename:
            # An ASCII name first for clients that ignore filename* (curl -J), then the exact one.
            plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
            extra["ResponseContentDisposition"] = (f"{'inline' if inline else 'attachment'}; filename=\"{plain}\"; "
                                                   f"filename*=UTF-8''{quote(filename)}")
        elif inline:
            extra["ResponseContentDisposition"] = "inline"
        if content_type:
            extra["ResponseContentType"] = content_type
        return self._sign("get_object", expires_s=expires_s, Key=self._key(key), **extra)

    def objects(self, *, prefix: str) -> Iterator[StoredObject]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            for item in page.get("Contents", []):
                modified = item["LastModified"]
                if modified.tzinfo is None:
                    modified = modified.replace(tzinfo=UTC)
                yield StoredObject(key=str(item["Key"])[len(self.prefix):], size=int(item["Size"]), modified=modified)


# --- the configured store ------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _build(backend: str, media_root: str, bucket: str, endpoint: str, region: str, access_key: str, secret_key: str,
           prefix: str, ttl_s: int, part_bytes: int) -> Store:
    if backend == "local":
        return LocalStore(Path(media_root))
    if backend == "s3":
        return S3Store(bucket=bucket, endpoint=endpoint, region=region, access_key=access_key, secret_key=secret_key,
                       prefix=prefix, ttl_s=ttl_s, part_bytes=part_bytes)
    raise ValueError(f"TRAINYARD_STORAGE_BACKEND must be 'local' or 's3', not {backend!r}")


def store() -> Store:
    """The store the settings name (built once per configuration: boto3 clients are costly)."""
    s = settings
    return _build(s.TRAINYARD_STORAGE_BACKEND, str(s.MEDIA_ROOT), s.TRAINYARD_STORAGE_BUCKET, s.TRAINYARD_STORAGE_ENDPOINT,
                  s.TRAINYARD_STORAGE_REGION, s.TRAINYARD_STORAGE_ACCESS_KEY, s.TRAINYARD_STORAGE_SECRET_KEY,
                  s.TRAINYARD_STORAGE_PREFIX, s.TRAINYARD_STORAGE_URL_TTL_S, s.TRAINYARD_STORAGE_PART_BYTES)


def object_digest(*, key: str, limit: int) -> tuple[int, str]:
    """(size, sha256 hex) of a stored object, read through; stops a little past `limit` bytes."""
    digest = hashlib.sha256()
    size = 0
    body = store().get(key)
    try:
        for chunk in _chunks(body):
            digest.update(chunk)
            size += len(chunk)
            if size > limit:
                break
    finally:
        body.close()
    return size, digest.hexdigest()


def _chunks(body: IO[bytes]) -> Iterator[bytes]:
    while chunk := body.read(8 * CHUNK):
        yield chunk
