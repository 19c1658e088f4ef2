"""Every API answer that hands out a presigned store URL says `Cache-Control: private, no-store`
(apps.core.storage_views.no_store): the URL is a grant that expires, so no cache may keep or
replay it. In-process, against the local store, whose URLs are signed grants as S3's are."""

from __future__ import annotations

import hashlib
import io
import os
from typing import Any

import pytest
from django.http import HttpResponse

from apps.core.conditional import ApiConditionalGetMiddleware
from apps.core.storage_views import no_store, store_redirect
from apps.nodes.models import NodePool
from apps.runs.models import Checkpoint
from apps.runs.services.snapshots import snapshot_create
from tests.agents.server import A, make_run
from tests.runs.test_snapshots import tarball
from tests.storage.test_checkpoint_flow import agent, complete, put_parts, report, started

NO_STORE = "private, no-store"


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


@pytest.fixture
def local_store(settings: Any, tmp_path: Any) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.TRAINYARD_STORAGE_BACKEND = "local"


def test_checkpoint_plan_and_download_link_are_not_stored(local_store: None, cast: Any, pool: NodePool,
                                                          django_capture_on_commit_callbacks: Any) -> None:
    client, session = agent(pool, "n1")
    make_run(cast, pool)
    base = started(client, session)
    data = os.urandom(1000)
    rec = {**base, "step": 3, "file": "ckpt-3.pt", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "metrics": {}}
    planned = client.post(A + "checkpoints/", rec, format="json")
    assert planned.status_code == 200 and planned.json()["upload"]["parts"][0]["url"], planned.content
    assert planned["Cache-Control"] == NO_STORE
    plan = planned.json()["upload"]
    ckpt = Checkpoint.objects.get(pk=planned.json()["id"])
    assert complete(client, ckpt.pk, plan, put_parts(plan, data), django_capture_on_commit_callbacks).status_code == 200
    assert report(client, base, 3, data)["stored"] is True
    link = client.get(f"{A}checkpoints/{ckpt.pk}/download/")
    assert link.status_code == 200 and link.json()["url"], link.content
    assert link["Cache-Control"] == NO_STORE
    assert not link.has_header("ETag")  # nothing to revalidate: a fresh URL is signed each time


def test_snapshot_link_is_not_stored(local_store: None, cast: Any, pool: NodePool) -> None:
    archive = tarball([("train.py", "file", b"print('hi')\n")])
    snapshot = snapshot_create(project=cast.digits, user=cast.alice, fileobj=io.BytesIO(archive), size=len(archive))
    client, session = agent(pool, "n1")
    make_run(cast, pool, code_snapshot=snapshot)
    started(client, session)
    link = client.get(f"{A}snapshots/{snapshot.sha256}/download/")
    assert link.status_code == 200 and link.json()["url"], link.content
    assert link["Cache-Control"] == NO_STORE
    assert not link.has_header("ETag")


def test_artifact_upload_plan_is_not_stored(local_store: None, cast: Any, pool: NodePool) -> None:
    client, session = agent(pool, "n1")
    make_run(cast, pool)
    base = started(client, session)
    data = b"weights"
    body = {**base, "name": "model/weights.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    planned = client.post(A + "artifacts/", body, format="json")
    assert planned.status_code == 200 and planned.json()["upload"]["parts"][0]["url"], planned.content
    assert planned["Cache-Control"] == NO_STORE


def test_no_store_is_one_header_that_the_etag_middleware_respects(rf: Any) -> None:
    assert store_redirect("https://store.example/x?sig=1")["Cache-Control"] == NO_STORE
    middleware = ApiConditionalGetMiddleware(lambda request: no_store(HttpResponse(b'{"url": "x"}')))
    answer = middleware(rf.get("/api/v1/agent/snapshots/x/download/"))
    assert answer["Cache-Control"] == NO_STORE and not answer.has_header("ETag")
