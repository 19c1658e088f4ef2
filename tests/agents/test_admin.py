"""The Django admin for pools, nodes, devices and join tokens (in-process)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.nodes.auth import hash_secret
from apps.nodes.models import Device, JoinToken, Node, NodePool
from tests.agents.server import A, register


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


@pytest.fixture
def web(cast: Any) -> Client:
    client = Client()
    client.force_login(cast.admin)
    return client


def test_join_token_plaintext_shown_once_hashed_at_rest_and_revocable(web: Client, pool: NodePool) -> None:
    resp = web.post("/admin/nodes/jointoken/add/", {"pool": pool.pk, "name": "rack 7", "ttl_hours": "2"}, follow=True)
    assert resp.status_code == 200
    page = resp.content.decode()
    [secret] = set(re.findall(r"tyj_[A-Za-z0-9_-]{40,}", page))
    token = JoinToken.objects.get(name="rack 7")
    assert token.token_hash == hash_secret(secret) and secret not in str(JoinToken.objects.values().get(pk=token.pk))
    assert token.expires_at is not None and token.prefix == secret[:10]
    assert AuditEvent.objects.filter(action="node.join_token_created", actor__username="admin").exists()
    # Shown once: neither the list nor the token's own page has it again.
    assert secret not in web.get("/admin/nodes/jointoken/").content.decode()
    assert secret not in web.get(f"/admin/nodes/jointoken/{token.pk}/change/").content.decode()
    # The token works until it is revoked.
    body = {"protocol_version": 2, "agent_uid": "u1", "hostname": "h1", "join_token": secret, "pool": "local",
            "devices": [{"index": 0, "kind": "cpu"}]}
    assert Client().post(A + "register/", body, content_type="application/json").status_code == 201
    resp = web.post("/admin/nodes/jointoken/", {"action": "revoke", "_selected_action": [token.pk]}, follow=True)
    assert "Revoked 1 join token" in resp.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="node.join_token_revoked", actor__username="admin").exists()
    body["agent_uid"] = "u2"
    assert Client().post(A + "register/", body, content_type="application/json").status_code == 403
    assert web.post(f"/admin/nodes/jointoken/{token.pk}/delete/").status_code == 403


def test_nodes_are_read_only_and_drain_goes_through_the_service(web: Client, cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    page = web.get(f"/admin/nodes/node/{node.pk}/change/").content.decode()
    assert "n1" in page and "credential_hash" not in page and 'name="hostname"' not in page  # shown, not editable
    assert web.get("/admin/nodes/node/add/").status_code == 403
    assert web.get(f"/admin/nodes/device/{Device.objects.get(node=node).pk}/change/").status_code == 200
    assert web.post(f"/admin/nodes/device/{Device.objects.get(node=node).pk}/delete/").status_code == 403

    web.post("/admin/nodes/node/", {"action": "drain_with_deadline", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.state == "draining" and node.drain_deadline is not None
    event = AuditEvent.objects.get(action="node.draining", object_id=str(node.pk))
    assert event.actor == cast.admin and event.before == {"state": "ready"}
    web.post("/admin/nodes/node/", {"action": "undrain", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.state == "ready" and node.drain_deadline is None
    # A lost node cannot be drained: the service says why, the admin shows it.
    Node.objects.filter(pk=node.pk).update(state="lost")
    resp = web.post("/admin/nodes/node/", {"action": "drain", "_selected_action": [node.pk]}, follow=True)
    assert "Node n1: node n1 is lost" in resp.content.decode()


def test_pool_changes_are_audited_and_prices_are_not_edited_here(web: Client, pool: NodePool) -> None:
    resp = web.post("/admin/nodes/nodepool/add/", {"name": "gpu-a100", "description": "A100s", "kind": "batch",
                                                   "backend": "agent", "price_per_device_hour": "3.5",
                                                   "carbon_g_per_kwh": "300", "policy": "{}"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    made = NodePool.objects.get(name="gpu-a100")
    assert str(made.price_per_device_hour) == "3.5000"
    assert AuditEvent.objects.filter(action="node_pool.created", object_id=str(made.pk), actor__username="admin").exists()
    page = web.get(f"/admin/nodes/nodepool/{made.pk}/change/").content.decode()
    assert 'name="price_per_device_hour"' not in page  # dated prices live in billing
    web.post(f"/admin/nodes/nodepool/{made.pk}/change/", {"name": "gpu-a100", "description": "A100 80GB", "kind": "batch",
                                                          "backend": "agent", "carbon_g_per_kwh": "300", "policy": "{}"})
    assert NodePool.objects.get(pk=made.pk).description == "A100 80GB"
    event = AuditEvent.objects.get(action="node_pool.updated", object_id=str(made.pk))
    assert event.before is not None and event.before["description"] == "A100s"


def test_a_pools_scheduler_options_are_checked_on_save(web: Client, pool: NodePool) -> None:
    # A typo or a bad value used to be dropped silently when the scheduler read the pool: the
    # admin saw "saved" and the pool ran on the defaults. Now the form names the option.
    form = {"name": "local", "description": "", "kind": "batch", "backend": "agent", "carbon_g_per_kwh": "400"}
    page = web.get(f"/admin/nodes/nodepool/{pool.pk}/change/").content.decode()
    assert "Scheduler options as JSON" in page and "How this pool decides who goes next" in page
    for policy, said in (('{"max_preemption": 10}', "unknown scheduler option &#x27;max_preemption&#x27;; did you mean "
                                                    "&#x27;max_preemptions&#x27;?"),
                         ('{"demotion_levels": -1}', "demotion_levels must be a whole number of at least 0"),
                         ('{"ordering": "lifo"}', "ordering must be one of fifo, priority"),
                         ('{"demoted_fifo": "yes"}', "demoted_fifo must be true or false"),
                         ('[10]', "policy must be a JSON object of scheduler options")):
        resp = web.post(f"/admin/nodes/nodepool/{pool.pk}/change/", {**form, "policy": policy})
        assert resp.status_code == 200 and said in resp.content.decode(), policy  # the form again, with the error
        assert NodePool.objects.get(pk=pool.pk).policy == {}  # nothing stored
    assert not AuditEvent.objects.filter(action="node_pool.updated").exists()
    resp = web.post(f"/admin/nodes/nodepool/{pool.pk}/change/",
                    {**form, "policy": '{"max_preemptions": 10, "demotion_levels": 0, "demote_after_s": 7200}'})
    assert resp.status_code == 302
    assert NodePool.objects.get(pk=pool.pk).policy == {"max_preemptions": 10, "demotion_levels": 0, "demote_after_s": 7200}
    assert AuditEvent.objects.filter(action="node_pool.updated", object_id=str(pool.pk)).exists()
