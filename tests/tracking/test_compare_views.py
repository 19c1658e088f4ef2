"""The comparison page's defaults (a metric that differs, only differences above two runs, cost
per run), saved comparisons (API, page, tenancy, bad input) and a sweep's best trial.
tests/browser/test_compare_views.py and test_sweep_trials.py check what the scripts draw."""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.jobtemplates.models import JobTemplate
from apps.runs.models import Attempt, Run, RunStatus
from apps.tracking.models import SavedComparison
from apps.tracking.services import metric_points_store
from apps.tracking.sweeps import metric_lower_is_better, sweep_best_trial, sweep_objective
from tests.runs.factories import body, local_pool, make_sweep_template, make_template
from tests.tracking.conftest import make_attempt, make_node, make_run

T0 = 1_700_000_000.0


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _log(run: Run, values: dict[str, float]) -> None:
    metric_points_store(run_id=run.pk, attempt=1, rows=[(k, 10, v, 0, T0 + 10) for k, v in values.items()])


def _script(html: str, element_id: str) -> Any:
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


def _runs(cast: Any, n: int, **fields: Any) -> list[Run]:
    return [make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED, params={"lr": 0.1, "seed": i}, **fields)
            for i in range(n)]


# --- 1. what the comparison opens on -----------------------------------------------------------

def test_the_parallel_coordinates_start_on_a_metric_that_differs(cast: Any) -> None:
    """"epoch" is logged by every run and the same for all (a flat line): the page starts on
    val_accuracy, which differs, though fewer runs logged it than the flat one."""
    a, b, c = _runs(cast, 3)
    _log(a, {"epoch": 5, "val_accuracy": 0.91})
    _log(b, {"epoch": 5, "val_accuracy": 0.87})
    _log(c, {"epoch": 5})
    html = _client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk},{c.pk}").content.decode()
    metrics = _script(html, "compare-metrics")
    assert [(m["key"], m["differs"]) for m in metrics] == [("epoch", False), ("val_accuracy", True)]
    assert _script(html, "compare-defaults")["metric"] == "val_accuracy"


def test_with_no_metric_that_differs_the_widest_logged_is_the_default(cast: Any) -> None:
    a, b = _runs(cast, 2)
    _log(a, {"loss": 0.5, "only_a": 1.0})
    _log(b, {"loss": 0.5})
    defaults = _script(_client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk}").content.decode(), "compare-defaults")
    assert defaults["metric"] == "loss"


def test_a_nan_against_a_number_differs(cast: Any) -> None:
    a, b = _runs(cast, 2)
    _log(a, {"loss": math.nan})
    _log(b, {"loss": 0.25})
    metrics = _script(_client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk}").content.decode(), "compare-metrics")
    assert metrics[0]["differs"] is True


@pytest.mark.parametrize(("count", "only"), [(2, False), (3, True), (5, True)])
def test_only_differences_is_on_above_two_runs(cast: Any, count: int, only: bool) -> None:
    ids = ",".join(str(r.pk) for r in _runs(cast, count))
    html = _client(cast.alice).get(f"/compare/?runs={ids}").content.decode()
    assert _script(html, "compare-defaults")["only_differences"] is only


def test_each_run_shows_its_cost_beside_its_energy(cast: Any) -> None:
    a, b = _runs(cast, 2)
    node, _ = make_node()
    end = timezone.now() - timedelta(hours=1)
    # One device for half an hour at $2.00 per device-hour: $1.00; b never ran.
    make_attempt(a, node)
    Attempt.objects.filter(run=a).update(status="succeeded", started_at=end - timedelta(minutes=30), ended_at=end)
    html = _client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk}").content.decode()
    table = html[html.index('id="energy-table"'):html.index("</table>", html.index('id="energy-table"'))]
    assert "Cost</th>" in table and "Wh / step" in table
    costs = {int(pk): cost for pk, cost in re.findall(r'<tr data-run="(\d+)">.*?data-col="cost">([^<]*)<', table, re.S)}
    assert costs == {a.pk: "$1.00", b.pk: "$0.00"}


def test_the_summary_table_scrolls_sideways(cast: Any) -> None:
    a, b = _runs(cast, 2)
    html = _client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk}").content.decode()
    assert '<div class="scroll-x"><table class="table small" id="summary-table">' in html


# --- 2. saved comparisons ----------------------------------------------------------------------

def _save(cast: Any, user: Any, body: dict[str, Any]) -> Any:
    return cast.client(user).post("/api/v1/compare/views/", body, format="json")


def test_a_saved_comparison_is_listed_and_opens_for_the_team_with_its_settings(cast: Any) -> None:
    a, b, c = _runs(cast, 3)
    _log(a, {"loss": 0.3, "acc": 0.9})
    _log(b, {"loss": 0.4, "acc": 0.8})
    resp = _save(cast, cast.alice, {"name": "  lr   check ", "runs": [b.pk, a.pk, c.pk], "keys": ["loss"], "metric": "loss",
                                    "only_differences": False, "x": "time"})
    assert resp.status_code == 201, resp.content
    saved = resp.json()
    assert saved["name"] == "lr check" and saved["runs"] == [b.pk, a.pk, c.pk] and saved["project"] == cast.digits.pk
    assert saved["url"] == f"/compare/v/{saved['id']}/" and saved["created_by"] == "alice"
    assert AuditEvent.objects.filter(action="comparison.saved", object_id=str(saved["id"]), team_id=cast.vision.pk).exists()

    # Victor (a viewer in the same team) lists and opens it; its settings are the page's defaults.
    listed = cast.client(cast.victor).get("/api/v1/compare/views/").json()["results"]
    assert [v["id"] for v in listed] == [saved["id"]]
    for path in (saved["url"], f"/compare/?view={saved['id']}"):
        page = _client(cast.victor).get(path)
        assert page.status_code == 200, path
        html = page.content.decode()
        assert f'data-runs="{b.pk},{a.pk},{c.pk}"' in html and "lr check" in html
        defaults = _script(html, "compare-defaults")
        assert defaults["metric"] == "loss" and defaults["only_differences"] is False and defaults["x"] == "time"
        assert defaults["keys"] == ["loss"] and defaults["saved"]["id"] == saved["id"]
    # The comparison page of these runs lists it, with "Save view".
    html = _client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk}").content.decode()
    assert 'id="save-view"' in html and f'href="/compare/v/{saved["id"]}/"' in html and "Save view" in html


def test_another_teams_saved_comparison_is_a_404_everywhere(cast: Any) -> None:
    a, b = _runs(cast, 2)
    saved_id = _save(cast, cast.alice, {"name": "mine", "runs": f"{a.pk},{b.pk}"}).json()["id"]
    assert _client(cast.bob).get(f"/compare/v/{saved_id}/").status_code == 404
    assert _client(cast.bob).get(f"/compare/?view={saved_id}").status_code == 404
    assert _client(cast.bob).get("/compare/?view=abc").status_code == 404
    assert cast.client(cast.bob).get(f"/api/v1/compare/views/{saved_id}/").status_code == 404
    assert cast.client(cast.bob).delete(f"/api/v1/compare/views/{saved_id}/").status_code == 404
    assert cast.client(cast.bob).get("/api/v1/compare/views/").json()["results"] == []
    assert cast.client(None).get("/api/v1/compare/views/").status_code in (401, 403)
    assert SavedComparison.objects.filter(pk=saved_id).exists()
    # Nor can bob save a comparison of alice's runs: they are not runs he can see.
    resp = _save(cast, cast.bob, {"name": "peek", "runs": [a.pk, b.pk]})
    assert resp.status_code == 400 and resp.json()["error"]["fields"]["runs"] == [f"no run {a.pk}, {b.pk} that you can see"]


def test_deleting_a_saved_comparison(cast: Any) -> None:
    a, b = _runs(cast, 2)
    saved_id = _save(cast, cast.alice, {"name": "mine", "runs": [a.pk, b.pk]}).json()["id"]
    # A teammate who did not save it, and is no admin, may not delete it.
    assert cast.client(cast.victor).delete(f"/api/v1/compare/views/{saved_id}/").status_code == 403
    assert cast.client(cast.alice).delete(f"/api/v1/compare/views/{saved_id}/").status_code == 204
    assert not SavedComparison.objects.filter(pk=saved_id).exists()
    assert AuditEvent.objects.filter(action="comparison.deleted", object_id=str(saved_id)).exists()
    assert _client(cast.alice).get(f"/compare/v/{saved_id}/").status_code == 404


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"runs": "A,B"}, "name", "give the comparison a name"),
    ({"name": "   ", "runs": "A,B"}, "name", "give the comparison a name"),
    ({"name": "x" * 101, "runs": "A,B"}, "name", "101 characters; a name has at most 100"),
    ({"name": 7, "runs": "A,B"}, "name", "give the comparison a name"),
    ({"name": "v"}, "runs", "required"),
    ({"name": "v", "runs": "A"}, "runs", "1 runs; a comparison takes 2 to 50"),
    ({"name": "v", "runs": "A,A"}, "runs", "a run is listed twice"),
    ({"name": "v", "runs": "A,x"}, "runs", "'x' is not a run id"),
    ({"name": "v", "runs": {"a": 1}}, "runs", "must be a list"),
    ({"name": "v", "runs": "A,B", "x": "epoch"}, "x", "must be one of step, time"),
    ({"name": "v", "runs": "A,B", "only_differences": "yes"}, "only_differences", "must be true, false or null"),
    ({"name": "v", "runs": "A,B", "keys": [f"k{i}" for i in range(21)]}, "keys", "21 keys; a comparison shows at most 20"),
    ({"name": "v", "runs": "A,B", "metric": "m" * 251}, "metric", "at most 250 characters"),
    ({"name": "v", "runs": "A,B", "project": "zz"}, "project", "must be a project id"),
])
def test_bad_input_is_a_400_naming_the_field(cast: Any, body: dict[str, Any], field: str, words: str) -> None:
    a, b = _runs(cast, 2)
    if isinstance(body.get("runs"), str):
        body = {**body, "runs": body["runs"].replace("A", str(a.pk)).replace("B", str(b.pk))}
    resp = _save(cast, cast.alice, body)
    assert resp.status_code == 400, resp.content
    messages = resp.json()["error"]["fields"][field]
    assert any(words in m for m in messages), messages
    assert not SavedComparison.objects.exists()


def test_a_name_is_unique_in_its_project(cast: Any) -> None:
    a, b = _runs(cast, 2)
    assert _save(cast, cast.alice, {"name": "best", "runs": [a.pk, b.pk]}).status_code == 201
    resp = _save(cast, cast.alice, {"name": "best", "runs": [b.pk, a.pk]})
    assert resp.status_code == 400 and "already has a comparison named 'best'" in resp.json()["error"]["fields"]["name"][0]


def test_another_teams_project_is_a_404_and_runs_must_be_the_projects_teams(cast: Any) -> None:
    a, b = _runs(cast, 2)
    assert _save(cast, cast.alice, {"name": "v", "runs": [a.pk, b.pk], "project": cast.tinylm.pk}).status_code == 404
    # The admin sees both teams' runs, but a saved view holds one team's: the other could not open it.
    nlp_run = make_run(cast.tinylm, name="n", status=RunStatus.SUCCEEDED)
    resp = _save(cast, cast.admin, {"name": "v", "runs": [a.pk, nlp_run.pk]})
    assert resp.status_code == 400 and f"run {nlp_run.pk} is not in the team of project vision/digits" in resp.json()["error"]["message"]


# --- 3. a sweep's best trial -------------------------------------------------------------------

def test_best_trial_follows_the_objectives_direction() -> None:
    rows = [{"id": 1, "metric": 0.5}, {"id": 2, "metric": 0.2}, {"id": 3, "metric": "NaN"}, {"id": 4, "metric": None},
            {"id": 5, "metric": 0.9}, {"id": 6, "metric": 0.2}]
    assert sweep_best_trial(rows=rows, goal="min") == 2  # the earlier of two equal
    assert sweep_best_trial(rows=rows, goal="max") == 5
    assert sweep_best_trial(rows=[{"id": 1, "metric": None}], goal="min") is None
    assert sweep_best_trial(rows=[{"id": 1, "metric": math.inf}, {"id": 2, "metric": 3.0}], goal="max") == 2


def test_the_objective_comes_from_the_sweep_or_the_metrics_name() -> None:
    assert sweep_objective(params={"objective": {"metric": "val_loss", "goal": "max"}}, metric="val_accuracy") == {
        "metric": "val_loss", "goal": "max", "given": True}
    assert sweep_objective(params={"objective": {"metric": "val_loss"}}, metric=None)["goal"] == "min"
    assert sweep_objective(params={}, metric="val_accuracy") == {"metric": "val_accuracy", "goal": "max", "given": False}
    assert sweep_objective(params={}, metric="eval_loss")["goal"] == "min"
    assert sweep_objective(params={}, metric=None) is None
    assert metric_lower_is_better("train/loss") and metric_lower_is_better("perplexity") and not metric_lower_is_better("accuracy")


def _sweep(cast: Any, objective: dict[str, str] | None) -> tuple[Run, list[Run]]:
    template = JobTemplate.objects.create(slug="cmp-sweep", version=1, title="Sweep", kind="sweep",
                                          entrypoint="trainyard:sweep-controller")
    params: dict[str, Any] = {"space": {"lr": [0.1, 0.01, 0.001]}}
    if objective:
        params["objective"] = objective
    parent = make_run(cast.digits, template=template, name="sw", status=RunStatus.SUCCEEDED, nodes=1, devices_per_node=0,
                      params=params)
    trials = []
    for i, (lr, loss, acc) in enumerate(((0.1, 0.9, 0.70), (0.01, 0.2, 0.93), (0.001, 0.4, 0.95))):
        trial = make_run(cast.digits, name=f"sw #{i + 1}", parent=parent, status=RunStatus.SUCCEEDED, params={"lr": lr, "steps": 5})
        _log(trial, {"val_loss": loss, "val_accuracy": acc})
        trials.append(trial)
    return parent, trials


def _trial_section(cast: Any, parent: Run) -> str:
    html = _client(cast.alice).get(f"/runs/{parent.pk}/").content.decode()
    section = html[html.index('id="sweep-trials"'):]
    return section[:section.index("</section>")]


def test_a_sweep_marks_its_best_trial_by_its_objective(cast: Any) -> None:
    parent, trials = _sweep(cast, {"metric": "val_loss", "goal": "min"})
    section = _trial_section(cast, parent)
    best = re.findall(r'<tr data-run="(\d+)" class="best-trial">', section)
    assert best == [str(trials[1].pk)] and section.count(">best</span>") == 1
    assert "val_loss (final)" in section and "objective: val_loss, lower is better" in section
    assert "(from its name)" not in section
    chart = _script(section, "sweep-chart")
    assert chart["metric"] == "val_loss" and chart["goal"] == "min" and chart["param_names"] == ["lr"]
    assert [(t["id"], t["values"], t["best"]) for t in chart["trials"]] == [
        (trials[0].pk, [0.1], False), (trials[1].pk, [0.01], True), (trials[2].pk, [0.001], False)]
    assert "tracking/sweep.js" in section and 'id="sweep-parcoords"' in section


def test_without_an_objective_the_shown_metric_and_its_name_decide(cast: Any) -> None:
    parent, trials = _sweep(cast, None)
    section = _trial_section(cast, parent)
    # val_accuracy is shown first among held-out figures, and higher is better.
    assert re.findall(r'<tr data-run="(\d+)" class="best-trial">', section) == [str(trials[2].pk)]
    assert "objective: val_accuracy, higher is better (from its name)" in section


def test_a_sweep_may_name_its_objective_when_submitted(cast: Any) -> None:
    """The sweep template's schema takes `objective`, kept on the sweep; a bad goal is a 400 naming the field."""
    local_pool()
    make_template()
    make_sweep_template()
    sweep = {"template": "digits-classifier", "strategy": "grid", "space": {"lr": [0.001, 0.01]}, "params": {"steps": 10},
             "max_runs": 2, "objective": {"metric": "val_loss", "goal": "min"}}
    resp = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=sweep), format="json")
    assert resp.status_code == 201, resp.content
    assert Run.objects.get(pk=resp.json()["id"]).params["objective"] == {"metric": "val_loss", "goal": "min"}
    bad = {**sweep, "objective": {"metric": "val_loss", "goal": "down"}}
    resp = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=bad), format="json")
    assert resp.status_code == 400 and "params.objective.goal" in resp.json()["error"]["fields"], resp.content
