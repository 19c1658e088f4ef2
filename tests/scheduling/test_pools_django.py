"""Runs that may use several pools (issue 28), through the portal: submission (API) -> scheduling
pass -> the run's page and API say where it was placed and why; the budget check counts the
chosen pool's price; bad `resources.pools` are 400s naming the field."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.billing.models import Budget
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.nodes.services import join_token_create
from apps.runs.models import Run, RunStatus
from apps.runs.services.rerun import run_resources
from apps.scheduling.services import scheduling_pass
from tests.runs.factories import body, make_template
from tests.scheduling.test_django_scheduling import make, start


def _register(pool: NodePool, uid: str) -> None:
    _, secret = join_token_create(pool=pool)
    reply = APIClient().post("/api/v1/agent/register/", {
        "protocol_version": 1, "agent_version": "t", "agent_uid": uid, "join_token": secret, "pool": pool.name,
        "hostname": uid, "name": uid, "address": "127.0.0.1", "cpus": 2, "memory_bytes": 1,
        "devices": [{"index": 0, "kind": "cpu", "uuid": "", "model": "cpu", "memory_bytes": 0}], "running": []},
        format="json")
    assert reply.status_code == 201, reply.content


@pytest.fixture
def fleet(cast: Any) -> dict[str, NodePool]:
    """Pools a100 ($2/device-hour) and h100 ($4), one 1-device node each, and a template whose
    finished runs went twice as fast in h100 (100 steps in 100 s against 200 s)."""
    pools = {name: NodePool.objects.create(name=name, price_per_device_hour=Decimal(price))
             for name, price in (("a100", "2.0"), ("h100", "4.0"))}
    for name, pool in pools.items():
        _register(pool, f"{name}-n1")
    template = make_template(resources={"pool": "a100", "nodes": 1, "devices_per_node": 1, "max_runtime_s": 1800,
                                        "max_nodes": 2, "max_devices_per_node": 4, "max_runtime_limit_s": 6 * 3600})
    end = timezone.now() - timedelta(hours=1)
    for name, seconds in (("a100", 200), ("h100", 100)):
        for _ in range(2):
            Run.objects.create(project=cast.digits, template=template, pool=pools[name], entrypoint="x",
                               status=RunStatus.SUCCEEDED, total_steps=100, steps_done=100,
                               started_at=end - timedelta(seconds=seconds), finished_at=end, queued_at=end)
    return pools


def _submit(cast: Any, **resources: Any) -> Any:
    return cast.client(cast.alice).post("/api/v1/runs/", body(cast, resources=resources), format="json")


def test_a_multi_pool_run_is_placed_in_the_faster_pool_and_its_page_and_api_say_why(cast: Any, fleet: Any) -> None:
    reply = _submit(cast, pools=["a100", "h100"])
    assert reply.status_code == 201, reply.content
    run = Run.objects.get(pk=reply.json()["id"])
    assert run.pool.name == "a100" and run.pools == ["a100", "h100"]
    result = scheduling_pass()
    assert result.placed == [run.pk]
    run.refresh_from_db()
    assert run.pool.name == "h100" and run.status == RunStatus.SCHEDULED
    assert run.pool_reason.startswith("placed in h100: predicted to finish ")
    assert "sooner than a100 (pace 2.0×)" in run.pool_reason
    detail = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/").json()["resources"]
    assert detail["pool"] == "h100" and detail["pools"] == ["a100", "h100"] and detail["pool_reason"] == run.pool_reason
    page = Client()
    page.force_login(cast.alice)
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-pool-reason"' in html and "placed in h100: predicted to finish" in html
    # The move is in the audit log.
    event = AuditEvent.objects.get(action="run.pool_chosen", object_id=str(run.pk))
    assert event.before == {"pool": "a100"} and event.after["pool"] == "h100"
    # A rerun may use the same pools again.
    assert run_resources(run=run)["pools"] == ["a100", "h100"] and run_resources(run=run)["pool"] == "h100"


def test_an_idle_slower_pool_wins_when_the_faster_one_is_held_long(cast: Any, fleet: Any) -> None:
    blocker = make(cast, fleet["h100"], max_runtime_s=6 * 3600)
    scheduling_pass()
    start(blocker)
    reply = _submit(cast, pools=["h100", "a100"])
    assert reply.status_code == 201, reply.content
    run = Run.objects.get(pk=reply.json()["id"])
    assert run.pool.name == "h100"
    assert scheduling_pass().placed == [run.pk]
    run.refresh_from_db()
    assert run.pool.name == "a100"
    assert run.pool_reason.startswith("placed in a100: predicted to finish") and "sooner than h100" in run.pool_reason


def test_the_budget_check_admits_a_run_that_fits_in_one_acceptable_pool(cast: Any, fleet: Any) -> None:
    NodePool.objects.filter(name="h100").update(price_per_device_hour=Decimal("50"))
    # Without history a run is costed at its max runtime, half an hour: $1 in a100, $25 in h100.
    Run.objects.filter(status=RunStatus.SUCCEEDED).delete()
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("5.00"))
    refused = _submit(cast, pool="h100")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "budget_exceeded"
    reply = _submit(cast, pool="h100", pools=["h100", "a100"])
    assert reply.status_code == 201, reply.content
    run = Run.objects.get(pk=reply.json()["id"])
    # Only the pool it fits the budget in stays acceptable, so wherever it runs the budget holds.
    assert run.pool.name == "a100" and run.pools == ["a100"]
    assert run.pool_reason.startswith("h100 left out: the run's predicted cost there does not fit its budget")
    Budget.objects.filter(project=cast.digits).update(amount=Decimal("0.01"))
    none = _submit(cast, pools=["h100", "a100"])
    assert none.status_code == 400 and none.json()["error"]["code"] == "budget_exceeded"
    assert "none of its acceptable pools (h100, a100)" in none.json()["error"]["message"]


@pytest.mark.parametrize(("resources", "words"), [
    ({"pools": "a100"}, "must be a non-empty list of pool names"),
    ({"pools": []}, "must be a non-empty list of pool names"),
    ({"pools": ["a100", "nope"]}, "no such pool 'nope'"),
    ({"pool": "a100", "pools": ["h100"]}, "must include resources.pool 'a100'"),
    ({"pools": ["a100", "h100"], "devices_per_node": 4}, "fits none of the pools a100, h100"),
])
def test_bad_pools_are_a_400_naming_the_field(cast: Any, fleet: Any, resources: dict[str, Any], words: str) -> None:
    reply = _submit(cast, **resources)
    assert reply.status_code == 400, reply.content
    messages = reply.json()["error"]["fields"]["resources.pools"]
    assert any(words in m for m in messages), messages
    assert not Run.objects.filter(status=RunStatus.QUEUED).exists()


def test_a_template_limited_to_some_pools_refuses_others_in_pools(cast: Any, fleet: Any) -> None:
    JobTemplate.objects.filter(slug="digits-classifier").update(
        resources={"pool": "a100", "pools": ["a100"], "max_nodes": 1, "max_devices_per_node": 1})
    reply = _submit(cast, pools=["a100", "h100"])
    assert reply.status_code == 400
    assert any("runs only in a100" in m for m in reply.json()["error"]["fields"]["resources.pools"])


def test_the_forecast_of_a_multi_pool_run_uses_the_pool_it_would_finish_first_in(cast: Any, fleet: Any) -> None:
    alice = cast.client(cast.alice)
    place = {k: v for k, v in body(cast, resources={"pools": ["a100", "h100"]}).items() if k != "tags"}
    idle = alice.post("/api/v1/queue/forecast/", place, format="json")
    assert idle.status_code == 200, idle.content
    assert idle.json()["pool"] == "h100" and idle.json()["starts_now"]
    assert idle.json()["pool_reason"].startswith("placed in h100: predicted to finish")
    assert "Placed in h100: predicted to finish" in idle.json()["summary"]
    blocker = make(cast, fleet["h100"], max_runtime_s=6 * 3600)
    scheduling_pass()
    start(blocker)
    busy = alice.post("/api/v1/queue/forecast/", place, format="json").json()
    assert busy["pool"] == "a100" and busy["starts_now"] and "sooner than h100" in busy["pool_reason"]
    # One pool: nothing to choose, nothing said.
    one = alice.post("/api/v1/queue/forecast/", {**place, "resources": {"pool": "h100"}}, format="json").json()
    assert one["pool"] == "h100" and one["pool_reason"] == "" and not one["starts_now"]


def test_a_multi_pool_run_no_pool_can_hold_has_no_estimate_and_says_so(cast: Any, fleet: Any) -> None:
    reply = _submit(cast, pools=["a100", "h100"], nodes=2)  # each pool has one node
    assert reply.status_code == 201, reply.content
    scheduling_pass()
    run = Run.objects.get(pk=reply.json()["id"])
    assert run.pool.name == "a100" and run.reason_code == "no_hardware"
    assert run.estimated_start is None and run.estimated_start_low is None and run.estimated_start_high is None
    assert "needs 2 nodes with 1 device each; pool a100 has 1 such ready node" in run.status_reason
    assert run.pool_reason == "in a100: none of a100, h100 can hold it as it stands"
