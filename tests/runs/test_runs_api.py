from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.nodes.models import Node
from apps.runs.models import Assignment, Attempt, AttemptStatus, Run, RunStatus
from tests.runs.factories import GOOD_TAGS, body, local_pool, make_template


@pytest.fixture
def runs(cast):
    local_pool("3.6")
    make_template()
    client = cast.client(cast.alice)
    a = client.post("/api/v1/runs/", body(cast, name="alpha", tags={**GOOD_TAGS, "dataset": "mnist"}), format="json").json()
    b = client.post("/api/v1/runs/", body(cast, name="beta", tags={**GOOD_TAGS, "family": "other"}), format="json").json()
    theirs = cast.client(cast.bob).post("/api/v1/runs/", body(cast, project=cast.tinylm.pk), format="json").json()
    return a, b, theirs


def ids(response):
    assert response.status_code == 200, response.json()
    return {r["id"] for r in response.json()["results"]}


def test_list_filters_and_isolation(cast, runs):
    a, b, theirs = runs
    client = cast.client(cast.alice)
    assert ids(client.get("/api/v1/runs/")) == {a["id"], b["id"]}
    assert ids(cast.client(cast.bob).get("/api/v1/runs/")) == {theirs["id"]}
    assert ids(cast.client(cast.victor).get("/api/v1/runs/")) == {a["id"], b["id"]}
    assert ids(cast.client(cast.outsider).get("/api/v1/runs/")) == set()
    assert ids(client.get("/api/v1/runs/?tag=dataset:mnist")) == {a["id"]}
    assert ids(client.get("/api/v1/runs/?tag=dataset:digits&tag=family:other")) == {b["id"]}
    assert ids(client.get("/api/v1/runs/?family=other")) == {b["id"]}
    assert ids(client.get("/api/v1/runs/?search=alp")) == {a["id"]}
    assert ids(client.get(f"/api/v1/runs/?search={b['id']}")) == {b["id"]}
    assert ids(client.get("/api/v1/runs/?status=queued,running")) == {a["id"], b["id"]}
    assert ids(client.get("/api/v1/runs/?status=succeeded")) == set()
    assert ids(client.get("/api/v1/runs/?template=digits-classifier&project=vision/digits")) == {a["id"], b["id"]}
    assert client.get("/api/v1/runs/?status=bogus").status_code == 400
    assert client.get("/api/v1/runs/?tag=novalue").status_code == 400
    assert client.get("/api/v1/runs/?project=nlp/tiny-lm").json()["error"]["fields"] == {"project": [
        "no such project 'nlp/tiny-lm' in your teams (give its id or team/project, e.g. vision/digits)"]}
    assert client.get(f"/api/v1/runs/{theirs['id']}/").status_code == 404
    assert client.post(f"/api/v1/runs/{theirs['id']}/cancel/").status_code == 404


def test_detail_reports_attempts_cost_energy_lineage(cast, runs):
    a, _, _ = runs
    run = Run.objects.get(pk=a["id"])
    node = Node.objects.create(pool=run.pool, hostname="gpu-7", agent_uid="u7")
    now = timezone.now()
    attempt = Attempt.objects.create(run=run, number=1, status=AttemptStatus.SUCCEEDED, started_at=now - timedelta(hours=1),
                                     ended_at=now, exit_code=0, energy_j=7_200_000.0,
                                     lineage={"dataset": {"name": "sklearn-digits", "sha256": "abc"}})
    Assignment.objects.create(attempt=attempt, node=node, devices=[0, 1], started_at=now - timedelta(hours=1), ended_at=now)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, steps_done=10, energy_j=7_200_000.0, energy_estimated=True,
                                         queue_position=None)
    detail = cast.client(cast.victor).get(f"/api/v1/runs/{run.pk}/").json()
    assert detail["status"] == "succeeded" and detail["progress"] == 0.5
    first = detail["attempts"][0]
    assert detail["attempts"] == [{"number": 1, "status": "succeeded", "nodes": ["gpu-7"], "started_at": first["started_at"],
                                   "ended_at": first["ended_at"], "exit_code": 0, "reason": ""}]
    assert first["started_at"] and first["ended_at"]
    assert Decimal(detail["cost"]["amount"]) == Decimal("7.2000")  # 2 device-hours × 3.6
    assert detail["energy"] == {"joules": 7_200_000.0, "kwh": 2.0, "estimated": True}
    assert detail["lineage"]["dataset"]["name"] == "sklearn-digits"
    assert detail["lineage"]["template"] == {"slug": "digits-classifier", "version": 1} and detail["lineage"]["parent"] is None
    assert detail["resources"] == {"pool": "local", "nodes": 1, "devices_per_node": 1, "max_runtime_s": 1800, "preemptible": True,
                                   "memory_gib_per_device": 0.0, "cpus_per_device": 0.0, "pools": [], "pool_reason": ""}
    assert set(detail["estimated_start"]) == {"at", "low", "high", "queue_position"}


def test_cancel_queued_run(cast, runs):
    a, _, _ = runs
    assert cast.client(cast.victor).post(f"/api/v1/runs/{a['id']}/cancel/").status_code == 403
    response = cast.client(cast.alice).post(f"/api/v1/runs/{a['id']}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert cast.client(cast.alice).post(f"/api/v1/runs/{a['id']}/cancel/").status_code == 409


def test_openapi_documents_runs(cast, runs):
    schema = cast.client(cast.alice).get("/api/schema/?format=json").json()
    assert "/api/v1/runs/" in schema["paths"] and "/api/v1/runs/{id}/cancel/" in schema["paths"]
    assert "/api/v1/templates/{slug}/" in schema["paths"] and "/api/v1/code-snapshots/" in schema["paths"]
    detail = schema["components"]["schemas"]["RunDetail"]["properties"]
    assert {"attempts", "estimated_start", "cost", "energy", "lineage", "progress", "status_reason"} <= set(detail)
    params = {p["name"] for p in schema["paths"]["/api/v1/runs/"]["get"]["parameters"]}
    assert {"project", "status", "template", "tag", "family", "parent", "search"} <= params
