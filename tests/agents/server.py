"""In-process helpers for the server side of the agent protocol: register a fake agent, make a run, claim."""

from __future__ import annotations

import json
from typing import Any

from django.core import signals
from django.db import close_old_connections
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.fleet.fastpath import AgentFastPath
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.nodes.services import join_token_create
from apps.runs.models import Run

A = "/api/v1/agent/"


class FastPathClient(APIClient):
    """An APIClient whose requests go through portal.wsgi's AgentFastPath first, as in a web
    process: the usual heartbeat and claim are answered there (counted in `fast`), the rest by
    Django as usual."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast = 0

    def request(self, **request: Any) -> Any:
        environ = self._base_environ(**{**request, **getattr(self, "_credentials", {})})
        delegated: list[Any] = []

        def django(env: dict[str, Any], start_response: Any) -> list[bytes]:
            delegated.append(super(FastPathClient, self).request(**{**request, "wsgi.input": env["wsgi.input"]}))
            return []

        answer: list[Any] = []
        # As Django's test handler does: the test's transaction must outlive the request.
        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)
        try:
            body = b"".join(AgentFastPath(django)(environ, lambda status, headers: answer.append((status, headers))))
        finally:
            signals.request_started.connect(close_old_connections)
            signals.request_finished.connect(close_old_connections)
        if delegated:
            return delegated[0]
        self.fast += 1
        status, headers = answer[0]
        response = HttpResponse(body, status=int(status.split()[0]), headers=dict(headers))
        response.json = lambda: json.loads(body)  # type: ignore[attr-defined]
        return response


def register(pool: NodePool, uid: str, slots: int = 1, running: list[Any] | None = None,
             client: APIClient | None = None) -> tuple[APIClient, dict[str, Any]]:
    _, secret = join_token_create(pool=pool)
    client = client or APIClient()
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
