"""Cheap heartbeats and idle claims (issue 30, item 5): a heartbeat takes its node from the web
process's credential cache (apps.nodes.auth) and records itself in one UPDATE fenced on that
snapshot, so it costs no credential lookup; an idle claim is one plain statement after the
authentication. The snapshot never outlives what it stands for: a revoked credential, a drain, a
new session or health news is seen by the very next request. Each test runs twice: through
Django's request handling, and through portal.wsgi's AgentFastPath in front of it, which must
answer the same."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.nodes import auth
from apps.nodes.models import Device, Node, NodePool, NodeState
from apps.nodes.services import node_drain
from apps.scheduling.services import placement_pass
from tests.agents.server import A, FastPathClient, make_run, register
from tests.nodes.test_node_states import reregister


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


@pytest.fixture(params=["django", "fastpath"])
def agent(request: pytest.FixtureRequest) -> type[APIClient]:
    """The client class the agent's requests go through."""
    return FastPathClient if request.param == "fastpath" else APIClient


def beat(client: APIClient, session: int, *, devices: list[dict[str, Any]] | None = None, **extra: Any) -> Any:
    body = {"session": session, "draining": False, "running": [],
            "devices": devices if devices is not None else [{"index": 0, "utilization": 0.5, "power_w": 10.0}], **extra}
    return client.post(A + "heartbeat/", body, format="json")


def statements(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries]


def test_a_cached_heartbeat_costs_no_credential_lookup_and_records_the_beat(pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())
    assert beat(client, reg["session"]).status_code == 200  # the node is in the cache now, whatever filled it
    node = Node.objects.get(agent_uid="n1")
    before = node.last_heartbeat_at
    with CaptureQueriesContext(connection) as ctx:
        resp = beat(client, reg["session"], devices=[{"index": 0, "utilization": 0.25, "power_w": 12.0}])
    assert resp.status_code == 200 and resp.json() == {"stop": [], "kill": [], "drain": False}
    assert not isinstance(client, FastPathClient) or client.fast == 1  # answered in front of Django
    sql = statements(ctx)
    assert not any("credential_hash =" in s and s.lstrip().upper().startswith("SELECT") for s in sql), sql
    assert len(sql) == 3, sql  # the fenced UPDATE of the node, its device's readings, the orders
    node.refresh_from_db()
    assert node.last_heartbeat_at > before
    assert Device.objects.get(node=node, index=0).utilization == 0.25
    assert node.last_status["devices"][0]["utilization"] == 0.25
    assert not AuditEvent.objects.filter(object_type="nodes.node", object_id=str(node.pk)).exclude(
        action="node.registered").exists()  # a heartbeat that changes nothing is no state change


def test_a_revoked_credential_is_refused_by_the_next_heartbeat_though_cached(pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())
    assert beat(client, reg["session"]).status_code == 200
    node = Node.objects.get(agent_uid="n1")
    assert auth.node_cache_get(node.credential_hash or "") is not None
    Node.objects.filter(pk=node.pk).update(credential_hash=None)  # as a retired Slurm node's is revoked
    assert beat(client, reg["session"]).status_code == 401
    assert auth.node_cache_get(node.credential_hash or "") is None


def test_a_credential_replaced_by_a_new_registration_is_refused_at_once(pool: NodePool, agent: type[APIClient]) -> None:
    old_client, reg = register(pool, "n1", client=agent())
    assert beat(old_client, reg["session"]).status_code == 200
    # The same agent joins again with a join token: a new credential; the old one is dead.
    new_client, new_reg = register(pool, "n1", client=agent())
    assert beat(old_client, reg["session"]).status_code == 401
    assert beat(new_client, new_reg["session"]).status_code == 200


def test_a_drained_node_hears_drain_from_its_next_heartbeat_and_claims_nothing(cast: Any, pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())
    assert beat(client, reg["session"]).json()["drain"] is False  # cached as ready
    node = Node.objects.get(agent_uid="n1")
    run = make_run(cast, pool)
    assert placement_pass() == 1  # an assignment is pending for the node ...
    node_drain(node=node, user=cast.admin)  # ... when an administrator drains it
    # The claim comes first, from the snapshot that still says ready: refused all the same.
    resp = client.post(A + "claim/", {"session": reg["session"], "wait_s": 0, "free_devices": [0]}, format="json")
    assert resp.status_code == 200 and resp.json() == {"assignments": [], "drain": True}
    assert beat(client, reg["session"]).json()["drain"] is True
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINING
    run.refresh_from_db()
    assert run.status != "running"


def test_a_new_session_is_not_refused_for_the_cached_old_one(pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())
    assert beat(client, reg["session"]).status_code == 200
    again = reregister(client, "n1")  # same credential, next session
    assert again["session"] == reg["session"] + 1
    assert beat(client, again["session"]).status_code == 200
    assert beat(client, reg["session"]).status_code == 409  # the old session is refused, as before


def test_health_news_takes_the_health_path_though_the_node_is_cached(pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())
    assert beat(client, reg["session"], devices=[{"index": 0, "healthy": True}]).status_code == 200
    assert beat(client, reg["session"], devices=[{"index": 0, "healthy": False, "health_reason": "XID 79"}]).status_code == 200
    device = Device.objects.get(node__agent_uid="n1", index=0)
    assert (device.healthy, device.health_reason) == (False, "XID 79")
    # Healthy again, reported to a process whose snapshot still says healthy: the fence on the
    # stored health sends it down the health path all the same.
    assert beat(client, reg["session"], devices=[{"index": 0, "healthy": True}]).status_code == 200
    assert Device.objects.get(pk=device.pk).healthy is True
    assert AuditEvent.objects.filter(action="device.healthy", object_type="nodes.node", object_id=str(device.node_id)).exists()


def test_an_idle_claim_is_one_statement_and_a_changed_node_is_read_afresh(cast: Any, pool: NodePool, agent: type[APIClient]) -> None:
    client, reg = register(pool, "n1", client=agent())

    def claim(session: int = reg["session"]) -> Any:
        return client.post(A + "claim/", {"session": session, "wait_s": 0, "free_devices": [0]}, format="json")

    with CaptureQueriesContext(connection) as cold:
        assert claim().json() == {"assignments": [], "drain": False}
    assert len(statements(cold)) == 2, statements(cold)  # the credential lookup, the pending check
    with CaptureQueriesContext(connection) as cached:
        assert claim().json() == {"assignments": [], "drain": False}
    assert len(statements(cached)) == 1, statements(cached)  # credential, state, session and pending work in one
    assert not isinstance(client, FastPathClient) or client.fast == 1
    run = make_run(cast, pool)
    assert placement_pass() == 1
    assert [a["run_id"] for a in claim().json()["assignments"]] == [run.pk]
    # A new session under the cached old one: the old session is told so, the new one is served.
    again = reregister(client, "n1")
    assert claim().status_code == 409
    assert claim(again["session"]).status_code == 200
    # A revoked credential is refused by the next claim, though cached.
    node = Node.objects.get(agent_uid="n1")
    Node.objects.filter(pk=node.pk).update(credential_hash=None)
    assert claim(again["session"]).status_code == 401
