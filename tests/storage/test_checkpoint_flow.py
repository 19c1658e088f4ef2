"""In-process, against both stores: the protocol-5 checkpoint flow (plan, direct upload, the
server's size and sha256 check, download links), retention deleting the object, the old
through-the-web path for older agents, users' downloads, and code snapshots in the store."""

from __future__ import annotations

import hashlib
import io
import os
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.storage import store
from apps.nodes.models import Node, NodePool
from apps.runs.models import Checkpoint
from apps.runs.services.checkpoints import checkpoint_key, checkpoints_verify_pending
from apps.runs.services.snapshots import snapshot_create, snapshot_unpack_safely
from apps.scheduling.services import placement_pass
from tests.agents.server import A, claim, make_run, register
from tests.runs.test_snapshots import tarball
from tests.storage.test_backends import http

MiB = 1024 * 1024


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def agent(pool: NodePool, uid: str, *, protocol_version: int = 5) -> tuple[APIClient, int]:
    client, reg = register(pool, uid)
    Node.objects.filter(hostname=uid).update(protocol_version=protocol_version)
    return client, reg["session"]


def started(client: APIClient, session: int) -> dict[str, Any]:
    placement_pass()
    [spec] = claim(client, session)
    base = {"attempt_id": spec["attempt_id"], "number": spec["number"]}
    assert client.post(A + "events/", {**base, "node_rank": 0, "time": 0, "event": "started"}, format="json").status_code == 200
    return base


def report(client: APIClient, base: dict[str, Any], step: int, data: bytes) -> dict[str, Any]:
    rec = {**base, "step": step, "file": f"ckpt-{step:010d}.pt", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
           "metrics": {}}
    resp = client.post(A + "checkpoints/", rec, format="json")
    assert resp.status_code == 200, resp.content
    return dict(resp.json())


def complete(client: APIClient, checkpoint_id: int, plan: dict[str, Any], done: list[dict[str, Any]], capture: Any) -> Any:
    """POST complete/; the worker's check (queued on commit, run inline here) follows the answer."""
    with capture(execute=True):
        return client.post(f"{A}checkpoints/{checkpoint_id}/complete/", {"upload_id": plan["upload_id"], "parts": done},
                           format="json")


def put_parts(plan: dict[str, Any], data: bytes) -> list[dict[str, Any]]:
    done = []
    for part in plan["parts"]:
        status, body, etag = http("PUT", part["url"], data[part["offset"]:part["offset"] + part["size"]])
        assert status == 200, body[:300]
        done.append({"number": part["number"], "etag": etag})
    return done


@pytest.mark.parametrize("size", [1000, 6 * MiB + 7])
def test_direct_upload_is_checked_then_stored_and_downloadable(backend: str, cast: Any, pool: NodePool, size: int,
                                                               django_capture_on_commit_callbacks: Any) -> None:
    client, session = agent(pool, "n1")
    run = make_run(cast, pool)
    base = started(client, session)
    data = os.urandom(size)
    answer = report(client, base, 9, data)
    plan = answer["upload"]
    assert answer["stored"] is False and sum(p["size"] for p in plan["parts"]) == size
    assert len(plan["parts"]) == (2 if backend == "s3" and size > 5 * MiB else 1)
    done = put_parts(plan, data)
    ckpt = Checkpoint.objects.get(pk=answer["id"])
    assert not ckpt.stored_path  # uploaded is not yet stored: the server has not checked it
    resp = complete(client, ckpt.pk, plan, done, django_capture_on_commit_callbacks)
    # The web checked the size; the sha256 is read back by a worker, never in a web request.
    assert resp.status_code == 200 and resp.json() == {"stored": False, "checking": True}, resp.content
    ckpt.refresh_from_db()
    assert ckpt.stored_path == checkpoint_key(checkpoint=ckpt) and store().size(ckpt.stored_path) == size
    again = report(client, base, 9, data)
    assert again == {"id": ckpt.pk, "stored": True}  # a replay gets no second plan
    assert complete(client, ckpt.pk, plan, done, django_capture_on_commit_callbacks).json() == {"stored": True}
    link = client.get(f"{A}checkpoints/{ckpt.pk}/download/").json()
    assert link["size"] == size and link["sha256"] == ckpt.sha256
    assert http("GET", link["url"])[:2] == (200, data)
    if backend == "s3":
        assert link["url"].startswith("http://127.0.0.1:")  # from the store, not from the web
    # An agent of protocol < 5 still downloads through the web.
    legacy = client.get(f"{A}checkpoints/{ckpt.pk}/file/")
    assert legacy.status_code == 200 and b"".join(legacy.streaming_content) == data  # type: ignore[attr-defined]
    # The owner's download: S3 sends the browser to the store; the local store serves it.
    owner = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/checkpoints/{ckpt.pk}/download/")
    if backend == "s3":
        assert owner.status_code == 302 and http("GET", owner["Location"])[:2] == (200, data)
        assert owner["Cache-Control"] == "private, no-store"  # the URL expires: no cache may replay the redirect
    else:
        assert owner.status_code == 200 and b"".join(owner.streaming_content) == data  # type: ignore[attr-defined]


def test_wrong_bytes_are_refused_and_removed(backend: str, cast: Any, pool: NodePool, django_capture_on_commit_callbacks: Any) -> None:
    client, session = agent(pool, "n1")
    make_run(cast, pool)
    base = started(client, session)
    answer = report(client, base, 4, b"the real state")
    done = put_parts(answer["upload"], b"other bytes!!!")  # the same size, another digest
    assert complete(client, answer["id"], answer["upload"], done, django_capture_on_commit_callbacks).status_code == 200
    ckpt = Checkpoint.objects.get(pk=answer["id"])
    # The worker's check found another digest: not stored, and the store keeps nothing.
    assert not ckpt.stored_path and ckpt.uploaded_at is None and store().size(checkpoint_key(checkpoint=ckpt)) is None
    assert client.get(f"{A}checkpoints/{ckpt.pk}/download/").status_code == 404
    # Nothing (or another size) uploaded: refused at once, by the web.
    resp = complete(client, answer["id"], answer["upload"], [], django_capture_on_commit_callbacks)
    assert resp.status_code == 400 and "bytes in the store" in resp.json()["error"]["message"]


def test_a_check_lost_with_the_broker_is_done_by_the_beat(backend: str, cast: Any, pool: NodePool) -> None:
    client, session = agent(pool, "n1")
    make_run(cast, pool)
    base = started(client, session)
    answer = report(client, base, 4, b"state")
    done = put_parts(answer["upload"], b"state")
    # No on-commit callbacks run: as if the queued check never reached a worker.
    client.post(f"{A}checkpoints/{answer['id']}/complete/", {"upload_id": "", "parts": done}, format="json")
    assert checkpoints_verify_pending(older_than=timedelta(minutes=1)) == 0  # too new: its message may be on its way
    Checkpoint.objects.filter(pk=answer["id"]).update(uploaded_at=timezone.now() - timedelta(minutes=2))
    assert checkpoints_verify_pending(older_than=timedelta(minutes=1)) == 1
    assert Checkpoint.objects.get(pk=answer["id"]).stored_path


def test_retention_deletes_the_object(backend: str, cast: Any, pool: NodePool, django_capture_on_commit_callbacks: Any) -> None:
    client, session = agent(pool, "n1")
    make_run(cast, pool)
    base = started(client, session)
    keys = []
    for step in (4, 9):
        data = b"state %d" % step
        answer = report(client, base, step, data)
        done = put_parts(answer["upload"], data)
        complete(client, answer["id"], answer["upload"], done, django_capture_on_commit_callbacks)
        keys.append(Checkpoint.objects.get(pk=answer["id"]).stored_path)
    gone = {**base, "step": 4, "file": "ckpt-0000000004.pt"}
    assert client.post(A + "checkpoints/deleted/", gone, format="json").json() == {"deleted": 1}
    assert store().size(keys[0]) is None and store().size(keys[1]) == len(b"state 9")


def test_older_agents_upload_through_the_web_into_the_store(backend: str, cast: Any, pool: NodePool) -> None:
    client, session = agent(pool, "old", protocol_version=4)
    make_run(cast, pool)
    base = started(client, session)
    data = b"weights" * 1000
    answer = report(client, base, 3, data)
    assert "upload" not in answer  # no plan (and no S3 multipart upload) for an agent that cannot use it
    bad = client.generic("PUT", f"{A}checkpoints/{answer['id']}/file/", data[:-1] + b"X",  # type: ignore[arg-type]
                         content_type="application/octet-stream")
    assert bad.status_code == 400
    put = client.generic("PUT", f"{A}checkpoints/{answer['id']}/file/", data, content_type="application/octet-stream")  # type: ignore[arg-type]
    assert put.status_code == 200 and put.json() == {"stored": True}
    ckpt = Checkpoint.objects.get(pk=answer["id"])
    assert store().get(ckpt.stored_path).read() == data


def test_code_snapshots_live_in_the_store(backend: str, cast: Any, pool: NodePool, tmp_path: Any) -> None:
    archive = tarball([("train.py", "file", b"print('hi')\n")])
    snapshot = snapshot_create(project=cast.digits, user=cast.alice, fileobj=io.BytesIO(archive), size=len(archive))
    assert store().get(snapshot.stored_path).read() == archive
    snapshot_unpack_safely(snapshot=snapshot, dest=tmp_path / "code")
    assert (tmp_path / "code" / "train.py").read_bytes() == b"print('hi')\n"
    client, session = agent(pool, "n1")
    make_run(cast, pool, code_snapshot=snapshot)
    started(client, session)
    link = client.get(f"{A}snapshots/{snapshot.sha256}/download/").json()
    assert link["sha256"] == snapshot.sha256 and http("GET", link["url"])[:2] == (200, archive)
    assert client.get(f"{A}snapshots/{'0' * 64}/download/").status_code == 404
