"""Memory and CPU cores per device, end to end in-process (issue 24, acceptance 4): the template's
defaults and limits, a clear 400 past them, the pass treating them as a node's capacity, the
waiting run's reason saying memory, and the claim spec carrying the figures to the agent's cgroup."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from apps.nodes.models import Node
from apps.runs.models import Run, RunStatus
from apps.scheduling.services import scheduling_pass
from tests.agents.server import A, register
from tests.runs.factories import LOCAL_RESOURCES, body, form_data, local_pool, make_template

GIB = 2**30


@pytest.fixture
def sized(cast: Any) -> Any:
    """Template digits-classifier asking 4 GiB and 1 core per device by default, at most 16 GiB and 2 cores."""
    local_pool()
    return make_template(resources={**LOCAL_RESOURCES, "memory_gib_per_device": 4, "max_memory_gib_per_device": 16,
                                    "cpus_per_device": 1, "max_cpus_per_device": 2})


def post(cast: Any, **changes: Any) -> Any:
    return cast.client(cast.alice).post("/api/v1/runs/", body(cast, **changes), format="json")


def test_defaults_and_overrides_are_stored_on_the_run_and_shown(cast: Any, sized: Any) -> None:
    default = post(cast)
    assert default.status_code == 201, default.json()
    run = Run.objects.get(pk=default.json()["id"])
    assert (run.memory_bytes_per_device, run.cpus_per_device) == (4 * GIB, 1.0)
    asked = post(cast, resources={"memory_gib_per_device": 1.5, "cpus_per_device": 2})
    assert asked.status_code == 201, asked.json()
    detail = cast.client(cast.alice).get(f"/api/v1/runs/{asked.json()['id']}/").json()
    assert detail["resources"]["memory_gib_per_device"] == 1.5 and detail["resources"]["cpus_per_device"] == 2.0
    browser = Client()
    browser.force_login(cast.alice)
    page = browser.get(f"/runs/{asked.json()['id']}/")
    assert page.status_code == 200 and "1.5 GiB of memory and 2 CPU cores per device" in page.content.decode()


@pytest.mark.parametrize(("resources", "field", "text"), [
    ({"memory_gib_per_device": 17}, "resources.memory_gib_per_device", "must be ≤ 16, this template's limit"),
    ({"cpus_per_device": 3}, "resources.cpus_per_device", "must be ≤ 2, this template's limit"),
    ({"memory_gib_per_device": -1}, "resources.memory_gib_per_device", "must be ≥ 0"),
    ({"memory_gib_per_device": "lots"}, "resources.memory_gib_per_device", "must be a number"),
])
def test_over_the_templates_limit_is_a_400_naming_the_field_and_the_limit(cast: Any, sized: Any, resources: dict[str, Any],
                                                                          field: str, text: str) -> None:
    response = post(cast, resources=resources)
    assert response.status_code == 400, response.json()
    fields = response.json()["error"]["fields"]
    assert field in fields and text in fields[field][0], fields
    assert not Run.objects.exists()


def test_without_a_template_limit_the_default_is_the_limit_and_none_asked_means_none(cast: Any) -> None:
    local_pool()
    make_template()  # no memory or cores in its resources
    run = Run.objects.get(pk=post(cast).json()["id"])
    assert (run.memory_bytes_per_device, run.cpus_per_device) == (0, 0.0)
    make_template(slug="sized", resources={**LOCAL_RESOURCES, "memory_gib_per_device": 2})
    response = post(cast, template="sized", resources={"memory_gib_per_device": 3})
    assert response.status_code == 400
    assert "must be ≤ 2" in response.json()["error"]["fields"]["resources.memory_gib_per_device"][0]


def test_two_runs_of_6_gib_on_a_node_of_2_devices_and_8_gib_do_not_run_together(cast: Any, sized: Any) -> None:
    client, reg = register(local_pool(), "n1", slots=2)
    Node.objects.filter(hostname="n1").update(memory_bytes=8 * GIB, cpus=8)
    ids = [post(cast, resources={"memory_gib_per_device": 6}).json()["id"] for _ in range(2)]
    assert scheduling_pass().placed == [ids[0]]
    first, second = Run.objects.get(pk=ids[0]), Run.objects.get(pk=ids[1])
    assert first.status == RunStatus.SCHEDULED and second.status == RunStatus.QUEUED
    assert second.reason_code == "waiting_for_memory"
    assert "Waiting for memory" in second.status_reason and "6 GiB of memory" in second.status_reason, second.status_reason

    # The queue says so too, to its team and to another team (the reason names no run and no money).
    for user in (cast.alice, cast.bob):
        queue = cast.client(user).get("/api/v1/queue/").json()
        rows = queue["results"] if isinstance(queue, dict) and "results" in queue else queue
        text = repr(rows)
        assert "waiting_for_memory" in text and "Waiting for memory" in text, text

    # The agent's claim carries the node's share for its cgroup: 6 GiB and 1 core for its one device.
    resp = client.post(A + "claim/", {"session": reg["session"], "wait_s": 0, "free_devices": [0, 1]}, format="json")
    assert resp.status_code == 200, resp.content
    [spec] = resp.json()["assignments"]
    assert spec["run_id"] == ids[0] and spec["memory_bytes"] == 6 * GIB and spec["cpus"] == 1.0

    # Another pass while the first runs: the second still waits for memory, and does not start.
    assert scheduling_pass().placed == []
    second.refresh_from_db()
    assert second.status == RunStatus.QUEUED and second.reason_code == "waiting_for_memory"


def test_more_memory_than_any_node_has_waits_with_no_estimate_saying_what_is_missing(cast: Any, sized: Any) -> None:
    register(local_pool(), "n1", slots=2)
    Node.objects.filter(hostname="n1").update(memory_bytes=8 * GIB)
    run_id = post(cast, resources={"memory_gib_per_device": 12}).json()["id"]
    scheduling_pass()
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.QUEUED and run.reason_code == "no_hardware"
    assert "12 GiB of memory" in run.status_reason and "8 GiB" in run.status_reason, run.status_reason
    assert run.estimated_start is None


def test_the_submit_form_takes_memory_and_cores_and_names_the_limit(cast: Any, sized: Any) -> None:
    browser = Client()
    browser.force_login(cast.alice)
    page = browser.get("/runs/new/?template=digits-classifier").content.decode()
    assert 'name="res_memory_gib_per_device"' in page and "16 GiB of memory per device" in page
    response = browser.post("/runs/new/", form_data(cast, res_memory_gib_per_device="2.5", res_cpus_per_device="2"))
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert (run.memory_bytes_per_device, run.cpus_per_device) == (int(2.5 * GIB), 2.0)
    refused = browser.post("/runs/new/", form_data(cast, res_memory_gib_per_device="20"))
    assert refused.status_code == 400 and "must be ≤ 16, this template&#x27;s limit" in refused.content.decode()
    assert Run.objects.count() == 1
