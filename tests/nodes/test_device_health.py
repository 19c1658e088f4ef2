"""GPU health as agents report it in heartbeats (in-process): an unhealthy device is recorded and
audited, the run on it is requeued as an infrastructure failure, the scheduler places nothing on
it, and the Nodes page and API say why."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.nodes.models import Device, Node, NodePool
from apps.nodes.services import join_token_create
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment, Attempt, Run
from apps.scheduling.services import placement_pass
from tests.agents.server import A, claim, make_run
from tests.pages import page_html

ECC = "3 uncorrectable ECC errors since the driver loaded (volatile); drain the node and reset the GPU"


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-444455550000"


def register_gpus(pool: NodePool, uid: str = "g1", count: int = 4,
                  health: dict[int, dict[str, Any]] | None = None) -> tuple[APIClient, int]:
    _, secret = join_token_create(pool=pool)
    client = APIClient()
    devices = [{"index": i, "kind": "gpu", "uuid": uuid(i), "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30,
                **(health or {}).get(i, {})} for i in range(count)]
    body = {"protocol_version": 2, "agent_version": "t", "agent_uid": uid, "join_token": secret, "pool": "local",
            "hostname": uid, "name": uid, "address": "127.0.0.1", "cpus": 8, "memory_bytes": 1, "devices": devices, "running": []}
    resp = client.post(A + "register/", body, format="json")
    assert resp.status_code == 201, resp.content
    client.credentials(HTTP_AUTHORIZATION=f"Node {resp.json()['credential']}")
    return client, int(resp.json()["session"])


def sample(i: int, healthy: bool = True, reason: str = "") -> dict[str, Any]:
    return {"index": i, "utilization": 50.0, "power_w": 300.0, "healthy": healthy, "health_reason": reason,
            "memory_used_bytes": 2**30, "ecc_uncorrected": 0 if healthy else 3, "throttle": []}


def heartbeat(client: APIClient, session: int, samples: list[dict[str, Any]], running: list[Any] | None = None) -> dict[str, Any]:
    resp = client.post(A + "heartbeat/", {"session": session, "draining": False, "devices": samples, "running": running or []},
                       format="json")
    assert resp.status_code == 200, resp.content
    return dict(resp.json())


def held(node: Node) -> dict[int, list[int]]:
    """Run id -> the device indexes it holds on the node."""
    rows = Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES).values_list("attempt__run_id", "devices")
    return {run_id: sorted(int(d) for d in devices) for run_id, devices in rows}


def test_a_fault_marks_the_gpu_unhealthy_audits_it_and_requeues_its_run(cast: Any, pool: NodePool) -> None:
    client, session = register_gpus(pool)
    node = Node.objects.get(agent_uid="g1")
    run = make_run(cast, pool)
    assert placement_pass() == 1
    [spec] = claim(client, session)
    [gpu] = spec["devices"]
    attempt = Attempt.objects.get(run=run)
    running = [{"attempt_id": attempt.pk, "number": 1, "node_rank": 0}]
    healthy = [sample(i) for i in range(4)]
    heartbeat(client, session, healthy, running)
    assert not AuditEvent.objects.filter(action__startswith="device.").exists()

    sick = [sample(i) if i != gpu else sample(i, healthy=False, reason=ECC) for i in range(4)]
    answer = heartbeat(client, session, sick, running)
    device = Device.objects.get(node=node, index=gpu)
    assert not device.healthy and device.health_reason == ECC and device.health_changed_at is not None
    assert device.memory_used_bytes == 2**30
    [event] = AuditEvent.objects.filter(action="device.unhealthy")
    assert (event.object_type, event.object_id, event.actor_label) == ("nodes.node", str(node.pk), "agent:g1")
    assert event.after == {"device": gpu, "uuid": uuid(gpu), "healthy": False, "reason": ECC}
    # Requeued as the infrastructure's failure, with the GPU and the fault named; the agent is told
    # to kill the job in the same heartbeat's answer.
    attempt.refresh_from_db()
    run.refresh_from_db()
    assert attempt.status == "lost" and run.status == "queued", (attempt.status, run.status)
    assert f"GPU {gpu} ({uuid(gpu)}) on g1 is unhealthy: {ECC}" in attempt.reason
    assert answer["kill"] == [attempt.pk]

    # Still faulty: no second audit record; the run is placed again, not on the sick GPU.
    heartbeat(client, session, sick)
    assert AuditEvent.objects.filter(action="device.unhealthy").count() == 1
    assert placement_pass() == 1
    assert gpu not in held(node)[run.pk]

    # Reset: healthy again, audited, and it takes work again.
    heartbeat(client, session, healthy)
    device.refresh_from_db()
    assert device.healthy and device.health_reason == ""
    assert AuditEvent.objects.filter(action="device.healthy", object_id=str(node.pk)).count() == 1


def test_the_scheduler_places_nothing_on_an_unhealthy_gpu(cast: Any, pool: NodePool) -> None:
    client, session = register_gpus(pool)
    node = Node.objects.get(agent_uid="g1")
    heartbeat(client, session, [sample(i, healthy=i != 2, reason="" if i != 2 else ECC) for i in range(4)])
    runs = [make_run(cast, pool) for _ in range(4)]
    whole = make_run(cast, pool, devices_per_node=4)
    placement_pass()
    placed = held(node)
    assert sorted(d for devices in placed.values() for d in devices) == [0, 1, 3]
    assert len(placed) == 3 and whole.pk not in placed
    assert sum(Run.objects.get(pk=r.pk).status == "queued" for r in runs) == 1


def test_a_gpu_unhealthy_at_registration_takes_no_work(cast: Any, pool: NodePool) -> None:
    register_gpus(pool, count=2, health={0: {"healthy": False, "health_reason": ECC}})
    node = Node.objects.get(agent_uid="g1")
    assert [(d.index, d.healthy) for d in node.devices.all()] == [(0, False), (1, True)]
    make_run(cast, pool)
    make_run(cast, pool)
    placement_pass()
    assert sorted(held(node).values()) == [[1]]


def test_the_nodes_page_and_api_say_why_a_gpu_is_unhealthy(cast: Any, pool: NodePool) -> None:
    client, session = register_gpus(pool, count=2)
    heartbeat(client, session, [sample(0), sample(1, healthy=False, reason=ECC)])
    [row] = cast.client(cast.alice).get("/api/v1/nodes/").json()["results"]
    assert row["devices_unhealthy"] == 1 and row["devices_free"] == 1
    sick = row["devices"][1]
    assert sick["healthy"] is False and sick["health_reason"] == ECC and sick["health_changed_at"]
    assert row["devices"][0]["healthy"] is True and row["devices"][0]["memory_used_bytes"] == 2**30
    html = page_html(cast.alice, "/nodes/")
    # In words beside the node line (not only a colour), in the square's text and in the device table.
    assert f"<strong>gpu1 unhealthy:</strong> {ECC}. Nothing new is placed on it" in html
    assert f"gpu1 unhealthy: {ECC}</span></a>" in html
    assert f"<th>gpu1 <strong>unhealthy: {ECC}</strong>" in html
    assert "none: unhealthy, takes no new work" in html
