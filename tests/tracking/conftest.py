"""Helpers for tracking tests: a run with an attempt assigned to a node holding a credential."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from apps.jobtemplates.models import JobTemplate
from apps.nodes.auth import hash_secret
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.tenants.models import Project


@dataclass
class Reporting:
    run: Run
    attempt: Attempt
    node: Node
    secret: str

    def post(self, body: Any, *, raw: bytes | None = None, secret: str | None = None) -> Any:
        client = Client()
        data = raw if raw is not None else json.dumps(body).encode()
        return client.post("/api/v1/agent/metrics/", data=data, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Node {secret or self.secret}")

    def batch(self, points: list[list[Any]], *, attempt: Attempt | None = None) -> dict[str, Any]:
        a = attempt or self.attempt
        return {"attempt_id": a.pk, "attempt": a.number, "points": points}


def make_template() -> JobTemplate:
    return JobTemplate.objects.get_or_create(slug="track-train", version=1,
                                             defaults={"title": "Track", "kind": "train", "entrypoint": "python -c pass"})[0]


def make_pool() -> NodePool:
    return NodePool.objects.get_or_create(name="track", defaults={"price_per_device_hour": "2.0"})[0]


def make_run(project: Project, **fields: Any) -> Run:
    defaults: dict[str, Any] = {"template": make_template(), "pool": make_pool(), "entrypoint": "python -c pass",
                                "status": RunStatus.RUNNING}
    defaults.update(fields)
    return Run.objects.create(project=project, **defaults)


def make_node() -> tuple[Node, str]:
    secret = "tyn_" + uuid.uuid4().hex
    node = Node.objects.create(pool=make_pool(), hostname=f"n-{uuid.uuid4().hex[:6]}", agent_uid=uuid.uuid4().hex,
                               credential_hash=hash_secret(secret))
    return node, secret


def make_attempt(run: Run, node: Node, number: int = 1) -> Attempt:
    attempt = Attempt.objects.create(run=run, number=number, status="running")
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="started")
    return attempt


def make_reporting(project: Project, **fields: Any) -> Reporting:
    run = make_run(project, **fields)
    node, secret = make_node()
    return Reporting(run=run, attempt=make_attempt(run, node), node=node, secret=secret)


@pytest.fixture
def reporting(cast: Any) -> Reporting:
    return make_reporting(cast.digits, name="digits-a")
