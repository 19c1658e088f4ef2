"""portal.wsgi's AgentFastPath (issue 30, item 5): the usual heartbeat and claim are answered in
front of Django; whatever is unusual gets Django's own answer, as if the fast path were not there.
(test_heartbeat_cache.py runs the usual cases through both.)"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.db import OperationalError
from django.test import override_settings
from rest_framework.test import APIClient

from apps.fleet import fastpath
from apps.nodes.models import Node, NodePool
from tests.agents.server import A, FastPathClient, register


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


@pytest.fixture
def agent(pool: NodePool) -> tuple[FastPathClient, int]:
    """A registered agent whose node this process has cached (its first heartbeat went to Django)."""
    client, reg = register(pool, "n1", client=FastPathClient())
    assert isinstance(client, FastPathClient)
    assert client.post(A + "heartbeat/", {"session": reg["session"], "running": []}, format="json").status_code == 200
    assert client.fast == 0
    return client, reg["session"]


def post_raw(client: APIClient, path: str, body: bytes, **extra: Any) -> Any:
    return client.post(A + path, body, content_type="application/json", **extra)


def test_the_usual_heartbeat_and_claim_never_reach_django(agent: tuple[FastPathClient, int]) -> None:
    client, session = agent
    beat = client.post(A + "heartbeat/", {"session": session, "running": [], "devices": [{"index": 0, "utilization": 0.5}]},
                       format="json")
    assert beat.status_code == 200 and beat.json() == {"stop": [], "kill": [], "drain": False}
    assert beat["Content-Type"] == "application/json"
    claim = client.post(A + "claim/", {"session": session, "wait_s": 0}, format="json")
    assert claim.status_code == 200 and claim.json() == {"assignments": [], "drain": False}
    stale = client.post(A + "claim/", {"session": session + 5, "wait_s": 0}, format="json")
    assert stale.status_code == 409 and stale.json() == {"assignments": [], "stale_session": True}
    assert client.fast == 3


@pytest.mark.parametrize(("path", "body", "extra", "status", "field"), [
    ("heartbeat/", b"{not json", {}, 400, None),
    ("heartbeat/", b'{"session": "one"}', {}, 400, "session"),
    ("heartbeat/", b'{"session": 1, "running": ["\\u0000"]}', {}, 400, None),
    ("heartbeat/", b"[1, 2]", {}, 400, "body"),
    ("heartbeat/", b'{"session": true}', {}, 400, "session"),
    ("heartbeat/", b'{"session": -1}', {}, 400, "session"),
    ("heartbeat/", b'{"session": 4611686018427387905}', {}, 400, "session"),
    ("heartbeat/", b'{"running": []}', {}, 400, "session"),
    ("claim/", b'{"session": -1, "wait_s": 0}', {}, 400, "session"),
    ("claim/", b'{"session": true, "wait_s": 0}', {}, 400, "session"),
    ("claim/", b'{"wait_s": 0}', {}, 400, "session"),
    ("claim/", b'{"session": 1, "wait_s": 99}', {}, 400, "wait_s"),
    ("claim/", b'{"session": 1, "wait_s": "soon"}', {}, 400, "wait_s"),
    ("heartbeat/", b'{"session": 1}', {"HTTP_AUTHORIZATION": "Node tyn_not-a-known-one"}, 401, None),
    ("heartbeat/", b'{"session": 1}', {"HTTP_AUTHORIZATION": "Token ty_user"}, 401, None),
    ("heartbeat/", b'{"session": 1}', {"HTTP_HOST": "evil.example"}, 400, None),
])
def test_anything_unusual_gets_djangos_own_answer(agent: tuple[FastPathClient, int], path: str, body: bytes,
                                                  extra: dict[str, str], status: int, field: str | None) -> None:
    client, session = agent
    body = body.replace(b'"session": 1', f'"session": {session}'.encode())
    if "HTTP_AUTHORIZATION" in extra:
        client.credentials(HTTP_AUTHORIZATION=extra.pop("HTTP_AUTHORIZATION"))
    resp = post_raw(client, path, body, **extra)
    assert resp.status_code == status, resp.content
    assert client.fast == 0
    if field is not None:
        assert field in resp.json()["error"]["fields"], resp.json()


def test_a_bad_session_is_refused_by_the_same_check_on_both_paths(agent: tuple[FastPathClient, int]) -> None:
    """The fast path declines what HeartbeatView refuses (one check, apps.fleet.api.fields), and
    the 400 names the field and its limits."""
    client, _ = agent
    for session in (True, -1, 2**62 + 1, "1", None):
        resp = client.post(A + "heartbeat/", {"session": session, "running": []}, format="json")
        assert resp.status_code == 400, (session, resp.content)
        assert resp.json()["error"]["fields"] == {"session": [f"an integer from 0 to {2**62}"]}
    assert client.fast == 0


def test_a_drained_node_is_told_by_django_from_a_fresh_read(agent: tuple[FastPathClient, int]) -> None:
    client, session = agent
    Node.objects.filter(agent_uid="n1").update(state="draining")  # behind the cached snapshot's back
    resp = client.post(A + "heartbeat/", {"session": session, "running": []}, format="json")
    assert resp.status_code == 200 and resp.json()["drain"] is True
    assert client.fast == 0


@override_settings(SECURE_SSL_REDIRECT=True, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_where_https_is_required_plain_http_gets_djangos_redirect(agent: tuple[FastPathClient, int]) -> None:
    cached, session = agent
    client = FastPathClient()  # its own handler: SecurityMiddleware reads the setting when built
    client.credentials(**getattr(cached, "_credentials", {}))
    plain = client.post(A + "heartbeat/", {"session": session, "running": []}, format="json")
    assert plain.status_code == 301 and client.fast == 0
    proxied = client.post(A + "heartbeat/", {"session": session, "running": []}, format="json", HTTP_X_FORWARDED_PROTO="https")
    assert proxied.status_code == 200 and client.fast == 1


def test_a_database_outage_is_a_503_naming_it(agent: tuple[FastPathClient, int], monkeypatch: pytest.MonkeyPatch) -> None:
    # The outage stands in for a stopped PostgreSQL (tests/reliability/test_database_outage.py
    # stops a real one under live agents, whose heartbeats come this way).
    def down(**kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(fastpath, "node_heartbeat_from_snapshot", down)
    client, session = agent
    resp = client.post(A + "heartbeat/", {"session": session, "running": []}, format="json")
    assert resp.status_code == 503 and resp["Retry-After"] == "5"
    assert json.loads(resp.content)["error"]["code"] == "database_unavailable"
    assert client.fast == 1


def test_a_fault_once_a_service_ran_is_answered_there_not_run_again(agent: tuple[FastPathClient, int],
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Any] = []

    def fails(**kwargs: Any) -> Any:
        calls.append(kwargs)
        raise RuntimeError("a bug after the claim was made")

    monkeypatch.setattr(fastpath, "node_claim_wait_from_snapshot", fails)
    client, session = agent
    with caplog.at_level(logging.ERROR, logger="apps.fleet.fastpath"):
        resp = client.post(A + "claim/", {"session": session, "wait_s": 0}, format="json")
    assert resp.status_code == 500 and json.loads(resp.content)["error"]["code"] == "server_error"
    assert len(calls) == 1 and client.fast == 1  # Django did not claim a second time
    assert "a bug after the claim was made" in caplog.text
