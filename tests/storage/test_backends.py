"""Both object stores, the local folder and S3 (moto's server over real HTTP), through the same
interface: put/get/size/delete, presigned single and multipart uploads, presigned downloads,
and the local store's signed URLs (expiry, tampering, the size they allow)."""

from __future__ import annotations

import hashlib
import io
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from apps.core.storage import LocalStore, ObjectMissing, S3Store, UploadPlan, object_digest, part_plan, store

MiB = 1024 * 1024


def http(method: str, url: str, data: bytes | None = None) -> tuple[int, bytes, str]:
    """(status, body, ETag) of a request to a plan's or link's URL: absolute ones (S3) over HTTP,
    relative ones (the local store, served by the web) through Django's test client."""
    if url.startswith("/"):
        client = Client()
        resp = (client.generic(method, url, data or b"", content_type="application/octet-stream") if method == "PUT"
                else client.get(url))
        body = b"".join(resp.streaming_content) if getattr(resp, "streaming", False) else resp.content  # type: ignore[attr-defined]
        return resp.status_code, body, str(resp.headers.get("ETag", ""))
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), str(resp.headers.get("ETag", ""))
    except urllib.error.HTTPError as err:
        return err.code, err.read(), ""


def upload(plan: UploadPlan, data: bytes) -> list[tuple[int, str]]:
    done = []
    for part in plan.parts:
        status, body, etag = http("PUT", part.url, data[part.offset:part.offset + part.size])
        assert status == 200, body[:300]
        done.append((part.number, etag))
    return done


def test_put_get_size_delete(backend: str) -> None:
    objects = store()
    assert isinstance(objects, S3Store if backend == "s3" else LocalStore)
    objects.put("a/b.bin", io.BytesIO(b"hello"))
    assert objects.size("a/b.bin") == 5 and objects.get("a/b.bin").read() == b"hello"
    assert object_digest(key="a/b.bin", limit=5) == (5, hashlib.sha256(b"hello").hexdigest())
    objects.delete("a/b.bin")
    assert objects.size("a/b.bin") is None
    with pytest.raises(ObjectMissing):
        objects.get("a/b.bin")
    objects.delete("a/b.bin")  # deleting what is gone is no error


def test_presigned_single_put_and_get(backend: str, db: Any) -> None:
    data = os.urandom(300_000)
    plan = store().presigned_put("ckpt/one.pt", len(data))
    assert plan.upload_id == "" and len(plan.parts) == 1
    parts = upload(plan, data)
    store().complete("ckpt/one.pt", plan.upload_id, parts)
    status, body, _ = http("GET", store().presigned_get("ckpt/one.pt"))
    assert status == 200 and body == data
    if backend == "s3":
        assert plan.parts[0].url.startswith("http://127.0.0.1:") and "X-Amz-Signature=" in plan.parts[0].url


def test_presigned_multipart_upload(s3_settings: Any) -> None:
    data = os.urandom(12 * MiB + 123)
    plan = store().presigned_put("ckpt/big.pt", len(data))
    assert plan.upload_id and [(p.offset, p.size) for p in plan.parts] == [(0, 5 * MiB), (5 * MiB, 5 * MiB), (10 * MiB, 2 * MiB + 123)]
    parts = upload(plan, data)
    assert store().size("ckpt/big.pt") is None  # nothing until the complete step
    store().complete("ckpt/big.pt", plan.upload_id, parts)
    assert object_digest(key="ckpt/big.pt", limit=len(data)) == (len(data), hashlib.sha256(data).hexdigest())


def test_part_plan_keeps_to_s3_limits() -> None:
    assert part_plan(0, 64 * MiB) == [(0, 0)]
    assert part_plan(10, 1) == [(0, 10)]  # never under 5 MiB a part
    huge = part_plan(10_000 * 64 * MiB + 1, 64 * MiB)
    assert len(huge) <= 10_000 and sum(size for _, size in huge) == 10_000 * 64 * MiB + 1


@pytest.fixture
def local(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.TRAINYARD_STORAGE_BACKEND = "local"


def test_local_urls_are_signed_for_one_method_size_and_time(local: None, db: Any, settings: Any) -> None:
    plan = store().presigned_put("x/y.bin", 4)
    url = plan.parts[0].url
    assert http("PUT", url, b"12345")[0] == 400  # more than the URL allows
    assert store().size("x/y.bin") is None
    assert http("PUT", url.replace("t=", "t=x"), b"1234")[0] == 403  # tampered
    assert http("GET", url)[0] == 403  # a PUT grant is no GET grant
    assert http("PUT", url, b"1234")[0] == 200
    get = store().presigned_get("x/y.bin")
    assert http("GET", get)[:2] == (200, b"1234")
    assert http("PUT", get, b"abcd")[0] == 403
    settings.TRAINYARD_STORAGE_URL_TTL_S = -1  # every URL signed so far has expired
    status, body, _ = http("GET", get)
    assert status == 403 and b"expired" in body


def test_local_keys_never_leave_the_folder(local: None) -> None:
    with pytest.raises(ObjectMissing):
        store().get("../../etc/passwd")
    assert store().size("../outside") is None
