from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client
from trainyard.client import error_from_response

from apps.audit.models import AuditEvent
from apps.runs.models import Run, RunStatus
from apps.runs.services.family import run_family_refresh
from apps.runs.services.lifecycle import _set_run
from tests.runs.factories import body, field_block, form_data, local_pool, make_sweep_template, make_template


@pytest.fixture
def templates(cast):
    local_pool()
    return make_template(), make_sweep_template()


def sweep_body(cast, **params):
    data = {"template": "digits-classifier", "strategy": "grid", "space": {"lr": [0.001, 0.01], "hidden": [32, 64]},
            "params": {"steps": 10}, "max_runs": 4}
    data.update(params)
    return body(cast, template="sweep", params=data)


def test_grid_sweep_creates_a_family_of_children(cast, templates):
    response = cast.client(cast.alice).post("/api/v1/runs/", sweep_body(cast), format="json")
    assert response.status_code == 201, response.json()
    parent = Run.objects.get(pk=response.json()["id"])
    children = list(parent.children.order_by("pk"))
    assert len(children) == 4 and response.json()["children"] == [c.pk for c in children]
    assert parent.status == RunStatus.RUNNING and parent.devices_per_node == 0 and parent.total_steps == 4
    assert {(c.params["lr"], c.params["hidden"]) for c in children} == {(0.001, 32), (0.001, 64), (0.01, 32), (0.01, 64)}
    assert all(c.params["steps"] == 10 and c.status == RunStatus.QUEUED and c.template.slug == "digits-classifier" for c in children)
    assert {c.family for c in children} == {parent.family} == {"digits-mlp"}
    assert all(c.tags["family"] == parent.family and c.tags["owner"] == "alice" for c in children)
    listed = cast.client(cast.alice).get(f"/api/v1/runs/?parent={parent.pk}").json()
    assert listed["count"] == 4


def test_random_sweep_is_seeded(cast, templates):
    space = {"lr": {"min": 0.0001, "max": 0.1, "log": True}, "hidden": [16, 32, 64]}
    client = cast.client(cast.alice)
    first = client.post("/api/v1/runs/", sweep_body(cast, strategy="random", space=space, max_runs=3, seed=7), format="json").json()
    second = client.post("/api/v1/runs/", sweep_body(cast, strategy="random", space=space, max_runs=3, seed=7), format="json").json()
    params = [[Run.objects.get(pk=c).params for c in r["children"]] for r in (first, second)]
    assert params[0] == params[1] and len(params[0]) == 3
    assert all(0.0001 <= p["lr"] <= 0.1 for p in params[0])


@pytest.mark.parametrize(("params", "field", "text"), [
    ({"max_runs": 3}, "params.max_runs", "the grid has 4 points, more than max_runs 3"),
    ({"max_runs": 51}, "params.max_runs", "must be ≤ 50"),
    ({"space": {"lr": [0.1, 7]}}, "params.space.lr", "must be ≤ 1.0 (got 7)"),
    ({"params": {"steps": 10, "bogus": 1}}, "params.params.bogus", "unknown parameter"),
    ({"template": "nope"}, "params.template", "no such template"),
    ({"template": "sweep"}, "params.template", "cannot be swept"),
    ({"space": {}}, "params.space", "non-empty"),
])
def test_bad_sweeps_refused(cast, templates, params, field, text):
    response = cast.client(cast.alice).post("/api/v1/runs/", sweep_body(cast, **params), format="json")
    assert response.status_code == 400
    assert text in " ".join(response.json()["error"]["fields"][field]), response.json()
    assert Run.objects.count() == 0


def test_family_rolls_up_when_children_finish(cast, templates, django_capture_on_commit_callbacks):
    parent_id = cast.client(cast.alice).post("/api/v1/runs/", sweep_body(cast), format="json").json()["id"]
    parent = Run.objects.get(pk=parent_id)
    children = list(parent.children.order_by("pk"))
    for child in children:  # placed and started, as the scheduler and agents would (the table allows no shortcut)
        _set_run(child, status=RunStatus.SCHEDULED, action="run.scheduled")
        _set_run(child, status=RunStatus.RUNNING, action="run.running")
    with django_capture_on_commit_callbacks(execute=True):
        for child in children[:3]:
            with transaction.atomic():
                _set_run(child, status=RunStatus.SUCCEEDED, action="run.succeeded")
    parent.refresh_from_db()
    assert parent.status == RunStatus.RUNNING and parent.steps_done == 3
    with django_capture_on_commit_callbacks(execute=True):
        _set_run(children[3], status=RunStatus.FAILED, action="run.failed", reason="boom")
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.status_reason == "1 of 4 runs failed" and parent.finished_at
    assert run_family_refresh(parent=parent).status == RunStatus.FAILED  # idempotent


def test_family_refresh_succeeds_and_api_refreshes(cast, templates):
    parent_id = cast.client(cast.alice).post("/api/v1/runs/", sweep_body(cast), format="json").json()["id"]
    Run.objects.filter(parent_id=parent_id).update(status=RunStatus.SUCCEEDED)  # no signal: the API must roll up
    detail = cast.client(cast.alice).get(f"/api/v1/runs/{parent_id}/").json()
    assert detail["status"] == "succeeded" and detail["progress"] == 1.0


def test_cancel_sweep_cancels_children(cast, templates):
    client = cast.client(cast.alice)
    parent_id = client.post("/api/v1/runs/", sweep_body(cast), format="json").json()["id"]
    assert cast.client(cast.victor).post(f"/api/v1/runs/{parent_id}/cancel/").status_code == 403
    response = client.post(f"/api/v1/runs/{parent_id}/cancel/")
    assert response.status_code == 200, response.json()
    assert set(Run.objects.filter(parent_id=parent_id).values_list("status", flat=True)) == {RunStatus.CANCELLED}
    assert response.json()["status"] == "cancelled"
    assert client.post(f"/api/v1/runs/{parent_id}/cancel/").status_code == 409


def test_unknown_objective_key_is_refused_by_name_and_nothing_stored(cast, templates):
    before = AuditEvent.objects.count()
    bad = sweep_body(cast, objective={"metrc": "val_loss", "goal": "min"})
    response = cast.client(cast.alice).post("/api/v1/runs/", bad, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["fields"]["params.objective.metrc"] == ["unknown key; allowed: goal, metric"]
    assert "params.objective.metrc: unknown key; allowed: goal, metric" in error["message"]
    assert Run.objects.count() == 0 and AuditEvent.objects.count() == before
    good = sweep_body(cast, objective={"metric": "val_loss", "goal": "min"})
    assert cast.client(cast.alice).post("/api/v1/runs/", good, format="json").status_code == 201


def test_unknown_objective_key_is_named_in_the_form_and_the_cli(cast, templates):
    page = Client()
    page.force_login(cast.alice)
    response = page.post("/runs/new/", form_data(
        cast, template="sweep", shown_template="sweep", p_template="digits-classifier", p_strategy="grid",
        p_space='{"lr": [0.001, 0.01]}', p_params='{"steps": 10}', p_max_runs="2", p_seed="0",
        p_objective='{"metrc": "val_loss", "goal": "min"}'))
    html = response.content.decode()
    assert response.status_code == 400, html[:2000]
    assert "objective.metrc: unknown key; allowed: goal, metric" in field_block(html, "p_objective")
    assert Run.objects.count() == 0
    # The CLI prints the API's refusal as the client raises it.
    api = cast.client(cast.alice).post("/api/v1/runs/", sweep_body(cast, objective={"metrc": "x"}), format="json")
    assert "params.objective.metrc: unknown key; allowed: goal, metric" in str(error_from_response(400, api.content))
