"""In-process, against both stores: an agent's artifact upload (plan, direct PUT, confirmation
with the server's read-back of size and sha256), its replays, and what it may not do."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from rest_framework.test import APIClient

from apps.artifacts.models import Artifact
from apps.artifacts.selectors import artifact_open
from apps.nodes.models import NodePool
from tests.agents.server import A, make_run
from tests.storage.conftest import backend, s3_server, s3_settings  # noqa: F401  (fixtures)
from tests.storage.test_checkpoint_flow import agent, put_parts, started

MiB = 1024 * 1024


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def report(client: APIClient, base: dict[str, Any], name: str, data: bytes, **extra: Any) -> Any:
    body = {**base, "name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), **extra}
    return client.post(A + "artifacts/", body, format="json")


def ship(client: APIClient, base: dict[str, Any], name: str, data: bytes) -> Any:
    plan = report(client, base, name, data)
    assert plan.status_code == 200, plan.content
    done = put_parts(plan.json()["upload"], data)
    return client.post(A + "artifacts/complete/", {**base, "token": plan.json()["token"], "parts": done}, format="json")


@pytest.mark.parametrize("size", [1000, 6 * MiB + 7])
def test_agent_upload_is_read_back_and_recorded(backend: str, cast: Any, pool: NodePool, size: int,  # noqa: F811
                                               django_capture_on_commit_callbacks: Any) -> None:
    client, session = agent(pool, "n1")
    run = make_run(cast, pool)
    base = started(client, session)
    data = os.urandom(size)
    plan = report(client, base, "model/weights.bin", data)
    assert plan.status_code == 200, plan.content
    done = put_parts(plan.json()["upload"], data)
    confirm = {**base, "token": plan.json()["token"], "parts": done}
    answer = client.post(A + "artifacts/complete/", confirm, format="json")
    assert answer.status_code == 200, answer.content
    art = Artifact.objects.get(run=run, name="model/weights.bin")
    assert (art.size, art.sha256) == (size, hashlib.sha256(data).hexdigest())
    with artifact_open(artifact=art) as fh:
        assert fh.read() == data
    # A replayed confirmation (the answer was lost) changes nothing.
    assert client.post(A + "artifacts/complete/", confirm, format="json").status_code == 200
    assert Artifact.objects.filter(run=run).count() == 1
    # The same name again replaces it.
    with django_capture_on_commit_callbacks(execute=True):
        assert ship(client, base, "model/weights.bin", b"smaller").status_code == 200
    art.refresh_from_db()
    assert art.size == 7


def test_bytes_other_than_reported_are_refused_and_deleted(backend: str, cast: Any, pool: NodePool) -> None:  # noqa: F811
    client, session = agent(pool, "n1")
    run = make_run(cast, pool)
    base = started(client, session)
    plan = report(client, base, "a.txt", b"the reported bytes")
    done = put_parts(plan.json()["upload"], b"other bytes here!!")
    bad = client.post(A + "artifacts/complete/", {**base, "token": plan.json()["token"], "parts": done}, format="json")
    assert bad.status_code == 400 and "upload" in bad.json()["error"]["fields"]
    assert not Artifact.objects.filter(run=run).exists()


def test_agent_refusals(cast: Any, pool: NodePool, settings: Any, tmp_path: Any) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    client, session = agent(pool, "n1")
    run = make_run(cast, pool)
    base = started(client, session)
    bad_name = report(client, base, "../x", b"x")
    assert bad_name.status_code == 400 and "name" in bad_name.json()["error"]["fields"]
    settings.TRAINYARD_ARTIFACT_MAX_BYTES = 5
    too_big = report(client, base, "big.bin", b"123456")
    assert too_big.status_code == 400 and "at most 5 bytes" in too_big.json()["error"]["fields"]["file"][0]
    settings.TRAINYARD_ARTIFACT_MAX_BYTES = 1000
    # Another node may not report for this attempt; a token is bound to its run.
    other, _ = agent(pool, "n2")
    assert report(other, base, "x.txt", b"x").status_code == 404
    plan = report(client, base, "x.txt", b"x").json()
    other_run = make_run(cast, pool)
    forged = {**base, "token": plan["token"] + "x", "parts": []}
    assert client.post(A + "artifacts/complete/", forged, format="json").status_code == 400
    assert not Artifact.objects.filter(run__in=[run, other_run]).exists()
