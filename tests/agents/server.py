"""In-process helpers for the server side of the agent protocol: register a fake agent, make a run, claim."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.nodes.services import join_token_create
from apps.runs.models import Run

A = "/api/v1/agent/"


def register(pool: NodePool, uid: str, slots: int = 1, running: list[Any] | None = None) -> tuple[APIClient, dict[str, Any]]:
    _, secret = join_token_create(pool=pool)
    client = APIClient()
    body = {"protocol_version": 1, "agent_version": "t", "agent_uid": uid, "join_token": secret, "pool": "local",
            "hostname": uid, "name": uid, "address": "127.0.0.1", "cpus": 2, "memory_bytes": 1,
            "devices": [{"index": i, "kind": "cpu", "uuid": "", "model": "cpu", "memory_bytes": 0} for i in range(slots)],
            "running": running or []}
    resp = client.post(A + "register/", body, format="json")
    assert resp.status_code == 201, resp.content
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['credential']}")
    return client, resp.json()


def make_run(cast: Any, pool: NodePool, nodes: int = 1, **fields: Any) -> Run:
    template, _ = JobTemplate.objects.get_or_create(slug="t", version=1, defaults={"title": "t", "kind": "custom", "entrypoint": "x"})
    return Run.objects.create(project=cast.digits, template=template, pool=pool, entrypoint="python x.py", nodes=nodes,
                              queued_at=timezone.now(), **fields)


def claim(client: APIClient, session: int) -> list[dict[str, Any]]:
    resp = client.post(A + "claim/", {"session": session, "wait_s": 0, "free_devices": [0]}, format="json")
    assert resp.status_code == 200, resp.content
    return list(resp.json()["assignments"])
