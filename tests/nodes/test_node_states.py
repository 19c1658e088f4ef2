"""A node's states as a fleet admin changes them and as its agent comes and goes (in-process):
every change in the audit log, an administrator's drain that a blip or an agent restart does not
undo, and registration refusals that say which pool is wrong."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.core.errors import Conflict
from apps.fleet.services import nodes_sweep
from apps.nodes.models import Node, NodePool
from apps.nodes.services import join_token_create, node_drain, node_undrain
from apps.scheduling.services import placement_pass
from tests.agents.server import A, make_run, register


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def heartbeat(client: APIClient, session: int, **extra: Any) -> dict[str, Any]:
    resp = client.post(A + "heartbeat/", {"session": session, "draining": False, "devices": [], "running": [], **extra},
                       format="json")
    assert resp.status_code == 200, resp.content
    return dict(resp.json())


def silence(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert nodes_sweep()["lost"] == 1


def reregister(client: APIClient, uid: str) -> dict[str, Any]:
    """The agent restarted: it registers again with its stored credential."""
    body = {"protocol_version": 1, "agent_version": "t", "agent_uid": uid, "hostname": uid, "address": "127.0.0.1",
            "devices": [{"index": 0, "kind": "cpu"}], "running": []}
    resp = client.post(A + "register/", body, format="json")
    assert resp.status_code == 200, resp.content
    return dict(resp.json())


def trail(node: Node) -> list[tuple[str, str, Any, Any]]:
    events = AuditEvent.objects.filter(object_type="nodes.node", object_id=str(node.pk)).order_by("pk")
    return [(e.action, e.actor_label, (e.before or {}).get("state") if e.before else None, (e.after or {})["state"])
            for e in events]


def test_every_state_change_of_a_node_is_in_the_audit_log(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    first = AuditEvent.objects.get(action="node.registered", object_id=str(node.pk))
    # A node that joins for the first time had no state: not "ready" (what the unsaved row said).
    assert first.before is None and first.after == {"state": "ready", "session": 1, "pool": "local", "devices": 1}
    node_drain(node=node, user=cast.admin, deadline_s=600)
    node_undrain(node=node, user=cast.admin)
    silence(node)
    heartbeat(client, reg["session"])  # back
    heartbeat(client, reg["session"], draining=True)  # its agent got SIGTERM
    heartbeat(client, reg["session"], draining=True, offline=True)  # and stopped cleanly
    reregister(client, "n1")
    assert trail(node) == [
        ("node.registered", "agent:n1", None, "ready"),
        ("node.draining", "admin", "ready", "draining"),
        ("node.ready", "admin", "draining", "ready"),
        ("node.lost", "system", "ready", "lost"),
        ("node.ready", "agent:n1", "lost", "ready"),
        ("node.draining", "agent:n1", "ready", "draining"),
        ("node.offline", "agent:n1", "draining", "offline"),
        ("node.registered", "agent:n1", "offline", "ready"),
    ]
    drained = AuditEvent.objects.get(action="node.draining", actor_label="admin")
    assert (drained.after or {})["drain_deadline"] is not None  # how long running work was given is on record
    # The admin edits no node behind the services' backs: the node's admin page is for reading.
    web = Client()
    web.force_login(cast.admin)
    assert web.post(f"/admin/nodes/node/{node.pk}/change/", {}).status_code == 403
    assert "Save" not in web.get(f"/admin/nodes/node/{node.pk}/change/").content.decode()


def test_an_admins_drain_outlasts_a_lost_node_coming_back_and_an_agent_restart(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    node_drain(node=node, user=cast.admin, deadline_s=600)
    deadline = Node.objects.get(pk=node.pk).drain_deadline
    # The node blips: silent past the timeout, then heartbeating again. It was drained for a
    # reason (maintenance, a bad GPU): it comes back draining, not ready for new work.
    silence(node)
    assert heartbeat(client, reg["session"])["drain"] is True
    assert Node.objects.get(pk=node.pk).state == "draining"
    assert ("node.draining", "agent:n1", "lost", "draining") in trail(node)
    # Its agent restarts: still drained, with the same deadline; no run is placed there.
    session = reregister(client, "n1")["session"]
    node.refresh_from_db()
    assert (node.state, node.drained_by_admin, node.drain_deadline) == ("draining", True, deadline)
    make_run(cast, pool)
    assert placement_pass() == 0
    # Undrained by an administrator, it takes work again, and a later blip brings it back ready.
    node_undrain(node=node, user=cast.admin)
    silence(node)
    heartbeat(client, session)
    assert Node.objects.get(pk=node.pk).state == "ready"
    # The agent's own drain (SIGTERM) is not an administrator's: a restart ends it.
    heartbeat(client, session, draining=True)
    heartbeat(client, session, draining=True, offline=True)
    reregister(client, "n1")
    assert Node.objects.get(pk=node.pk).state == "ready"


def test_an_offline_node_is_not_drained_into_lost(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    heartbeat(client, reg["session"], draining=True, offline=True)
    with pytest.raises(Conflict, match="offline"):
        node_drain(node=node, user=cast.admin)
    resp = cast.client(cast.admin).post(f"/api/v1/nodes/{node.pk}/drain/", {}, format="json")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "node_offline"
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert nodes_sweep()["lost"] == 0 and Node.objects.get(pk=node.pk).state == "offline"


def test_registration_refusals_name_the_pool_problem(pool: NodePool) -> None:
    NodePool.objects.create(name="gpu")
    _, secret = join_token_create(pool=pool)
    body = {"protocol_version": 1, "agent_uid": "u1", "hostname": "h1", "join_token": secret, "devices": [{"index": 0}]}

    def refusal(**extra: Any) -> tuple[str, str]:
        resp = APIClient().post(A + "register/", {**body, **extra}, format="json")
        assert resp.status_code == 400, resp.content
        error = resp.json()["error"]
        return error["code"], error["fields"]["pool"][0]

    assert refusal(pool="gpu") == ("wrong_pool", "the join token is for pool 'local', not 'gpu'")
    assert refusal(pool="nope") == ("unknown_pool", "there is no node pool 'nope'; the join token is for pool 'local'")
    assert APIClient().post(A + "register/", {**body, "pool": "local"}, format="json").status_code == 201
    # The same agent (its workdir) with a token of another pool.
    _, other = join_token_create(pool=NodePool.objects.get(name="gpu"))
    code, words = refusal(pool="gpu", join_token=other)
    assert (code, words) == ("registered_elsewhere", "this agent is already registered in pool 'local'")
    # The register answer names the pool (the agent says it on its console).
    assert APIClient().post(A + "register/", {**body, "agent_uid": "u2", "pool": "local"}, format="json").json()["pool"] == "local"
