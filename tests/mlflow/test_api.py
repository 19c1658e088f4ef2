"""The MLflow tracking API in process: MLflow's error shapes, tenancy, tracked-only runs, and that
the scheduler and billing leave tracked runs alone. (tests/mlflow/test_client.py drives it with
the real MLflow client.)"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.services import api_token_create
from apps.audit.models import AuditEvent
from apps.billing.models import Budget
from apps.billing.selectors import budgets_reserved
from apps.billing.services import budget_stop_running
from apps.mlflow_api.services import TRACKED_POOL, TRACKED_TEMPLATE
from apps.runs.models import Run, RunStatus
from apps.scheduling import snapshot
from apps.tracking.models import MetricPoint

API = "/mlflow/api/2.0/mlflow/"


class Mlflow:
    """MLflow's REST calls as its client makes them, with one user's token."""

    def __init__(self, user: Any) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {api_token_create(user=user, name='mlflow')[1]}"} if user else {}

    def get(self, endpoint: str, **params: Any) -> Any:
        return self.client.get(API + endpoint, params, headers=self.headers)

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self.client.post(API + endpoint, json.dumps(body), content_type="application/json", headers=self.headers)


def error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.content
    data = response.json()
    assert data["error_code"] == code, data
    return str(data["message"])


@pytest.fixture
def alice(cast: Any) -> Mlflow:
    return Mlflow(cast.alice)


@pytest.fixture
def tracked(alice: Mlflow, cast: Any) -> dict[str, Any]:
    response = alice.post("runs/create", {"experiment_id": str(cast.digits.pk), "start_time": 1_700_000_000_123,
                                          "run_name": "mlp", "tags": [{"key": "mlflow.user", "value": "alice"}]})
    assert response.status_code == 200, response.content
    return dict(response.json()["run"])


def test_no_or_bad_token_is_unauthenticated(cast: Any) -> None:
    error(Mlflow(None).get("experiments/get-by-name", experiment_name="vision/digits"), 401, "UNAUTHENTICATED")
    bad = Mlflow(None)
    bad.headers = {"Authorization": "Bearer tyu_nope"}
    error(bad.get("experiments/get-by-name", experiment_name="vision/digits"), 401, "UNAUTHENTICATED")


def test_experiment_is_a_project_of_your_team(cast: Any, alice: Mlflow) -> None:
    got = alice.get("experiments/get-by-name", experiment_name="vision/digits").json()["experiment"]
    assert got == alice.get("experiments/get", experiment_id=str(cast.digits.pk)).json()["experiment"]
    assert got["name"] == "vision/digits" and got["experiment_id"] == str(cast.digits.pk) and got["lifecycle_stage"] == "active"
    names = [e["name"] for e in alice.post("experiments/search", {}).json()["experiments"]]
    assert names == ["vision/digits"]
    bob = Mlflow(cast.bob)
    # Another team's experiment reads exactly like one that does not exist.
    hidden = error(bob.get("experiments/get-by-name", experiment_name="vision/digits"), 404, "RESOURCE_DOES_NOT_EXIST")
    absent = error(bob.get("experiments/get-by-name", experiment_name="vision/digitz"), 404, "RESOURCE_DOES_NOT_EXIST")
    assert hidden == absent.replace("digitz", "digits")
    error(bob.get("experiments/get", experiment_id=str(cast.digits.pk)), 404, "RESOURCE_DOES_NOT_EXIST")
    message = error(bob.post("experiments/create", {"name": "vision/digits"}), 403, "PERMISSION_DENIED")
    assert "Trainyard project" in message
    error(bob.post("experiments/create", {"name": "vision/new"}), 403, "PERMISSION_DENIED")
    error(alice.post("experiments/create", {"name": "Default"}), 400, "INVALID_PARAMETER_VALUE")
    error(alice.post("experiments/create", {"name": "vision/digits"}), 400, "RESOURCE_ALREADY_EXISTS")
    # A team admin may create a project of their team this way.
    created = alice.post("experiments/create", {"name": "vision/new-exp"}).json()["experiment_id"]
    assert alice.get("experiments/get-by-name", experiment_name="vision/new-exp").json()["experiment"]["experiment_id"] == created
    error(Mlflow(cast.victor).post("experiments/create", {"name": "vision/other"}), 403, "PERMISSION_DENIED")


def test_tracked_run_logs_params_tags_metrics(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    assert tracked["info"]["status"] == "RUNNING" and tracked["info"]["start_time"] == 1_700_000_000_123
    assert tracked["info"]["artifact_uri"] == f"mlflow-artifacts:/{cast.digits.pk}/{run_id}/artifacts"
    run = Run.objects.get(pk=run_id)
    assert run.tracked_only and run.status == RunStatus.RUNNING and run.name == "mlp"
    assert run.template.slug == TRACKED_TEMPLATE and not run.template.published and run.pool.name == TRACKED_POOL
    assert run.nodes == 0 and run.devices_per_node == 0
    assert AuditEvent.objects.filter(action="run.tracked", object_id=str(run.pk)).exists()

    assert alice.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.01"}).status_code == 200
    assert alice.post("runs/set-tag", {"run_id": run_id, "key": "stage", "value": "dev"}).status_code == 200
    assert alice.post("runs/log-metric", {"run_id": run_id, "key": "loss", "value": "NaN", "timestamp": 5, "step": 0}).status_code == 200
    metrics = [{"key": "loss", "value": 1.0 / (i + 1), "timestamp": 1_700_000_000_000 + i, "step": i + 1} for i in range(1000)]
    body = {"run_id": run_id, "metrics": metrics, "params": [{"key": "batch", "value": "64"}], "tags": [{"key": "k", "value": "v"}]}
    assert alice.post("runs/log-batch", body).status_code == 200

    got = alice.get("runs/get", run_id=run_id).json()["run"]
    assert {p["key"]: p["value"] for p in got["data"]["params"]} == {"lr": "0.01", "batch": "64"}
    assert {t["key"]: t["value"] for t in got["data"]["tags"]} == {"mlflow.user": "alice", "stage": "dev", "k": "v"}
    assert got["data"]["metrics"] == [{"key": "loss", "value": 1.0 / 1000, "timestamp": 1_700_000_000_999, "step": 1000}]
    history = alice.get("metrics/get-history", run_id=run_id, metric_key="loss").json()["metrics"]
    assert len(history) == 1001 and history[0]["value"] == "NaN" and history[0]["timestamp"] == 5
    assert [(m["step"], m["value"], m["timestamp"]) for m in history[1:]] == [(m["step"], m["value"], m["timestamp"]) for m in metrics]
    assert MetricPoint.objects.filter(run_id=run_id, key="loss").count() == 1001
    # The Trainyard API shows it like any run.
    api = cast.client(cast.alice)
    detail = api.get(f"/api/v1/runs/{run_id}/").json()
    assert detail["params"] == {"lr": "0.01", "batch": "64"} and detail["status"] == "running"
    assert api.get(f"/api/v1/runs/{run_id}/metrics/", {"key": "loss"}).status_code == 200


def test_bad_input_is_invalid_parameter_value(alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    assert alice.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.01"}).status_code == 200
    assert "already logged" in error(alice.post("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"}),
                                     400, "INVALID_PARAMETER_VALUE")
    too_many = [{"key": "x", "value": 1, "timestamp": 0, "step": i} for i in range(1001)]
    assert "limit is 1000" in error(alice.post("runs/log-batch", {"run_id": run_id, "metrics": too_many}), 400, "INVALID_PARAMETER_VALUE")
    assert "metrics[0].key" in error(alice.post("runs/log-metric", {"run_id": run_id, "key": "a b", "value": 1, "step": 0}),
                                     400, "INVALID_PARAMETER_VALUE")
    assert "metrics[0].value" in error(alice.post("runs/log-metric", {"run_id": run_id, "key": "a", "value": "x", "step": 0}),
                                       400, "INVALID_PARAMETER_VALUE")
    assert "step" in error(alice.post("runs/log-metric", {"run_id": run_id, "key": "a", "value": 1, "step": -1}),
                           400, "INVALID_PARAMETER_VALUE")
    assert "6000" in error(alice.post("runs/log-parameter", {"run_id": run_id, "key": "big", "value": "x" * 6001}),
                           400, "INVALID_PARAMETER_VALUE")
    error(alice.post("runs/update", {"run_id": run_id, "status": "DONE"}), 400, "INVALID_PARAMETER_VALUE")
    error(alice.post("runs/search", {"experiment_ids": [tracked["info"]["experiment_id"]], "filter": "metrics.loss < 1"}),
          400, "INVALID_PARAMETER_VALUE")
    error(alice.get("runs/get", run_id="nope"), 404, "RESOURCE_DOES_NOT_EXIST")
    error(alice.get("experiments/list"), 404, "ENDPOINT_NOT_FOUND")
    error(alice.client.get("/mlflow/api/2.0/mlflow/runs/log-metric", headers=alice.headers), 405, "BAD_REQUEST")


def test_other_team_and_viewer_cannot_touch_the_run(cast: Any, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    bob = Mlflow(cast.bob)
    error(bob.get("runs/get", run_id=run_id), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.post("runs/log-metric", {"run_id": run_id, "key": "loss", "value": 1, "step": 1}), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.post("runs/update", {"run_id": run_id, "status": "KILLED"}), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.get("metrics/get-history", run_id=run_id, metric_key="loss"), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.post("runs/create", {"experiment_id": str(cast.digits.pk)}), 404, "RESOURCE_DOES_NOT_EXIST")
    assert bob.post("runs/search", {"experiment_ids": [str(cast.tinylm.pk)]}).json() == {"runs": []}
    error(bob.post("runs/search", {"experiment_ids": [str(cast.digits.pk)]}), 404, "RESOURCE_DOES_NOT_EXIST")
    victor = Mlflow(cast.victor)  # a viewer of vision: reads, never writes
    assert victor.get("runs/get", run_id=run_id).status_code == 200
    error(victor.post("runs/log-metric", {"run_id": run_id, "key": "loss", "value": 1, "step": 1}), 403, "PERMISSION_DENIED")
    error(victor.post("runs/create", {"experiment_id": str(cast.digits.pk)}), 403, "PERMISSION_DENIED")
    assert MetricPoint.objects.filter(run_id=run_id).count() == 0


def test_end_goes_through_the_transition_table(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    info = alice.post("runs/update", {"run_id": run_id, "status": "FINISHED", "end_time": 1_700_000_100_000}).json()["run_info"]
    assert info["status"] == "FINISHED" and info["end_time"] == 1_700_000_100_000
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None
    assert AuditEvent.objects.filter(action="run.succeeded", object_id=str(run.pk)).exists()
    error(alice.post("runs/update", {"run_id": run_id, "status": "FAILED"}), 400, "INVALID_STATE")
    found = alice.post("runs/search", {"experiment_ids": [str(cast.digits.pk)]}).json()["runs"]
    assert [r["info"]["run_id"] for r in found] == [run_id]


def test_scheduler_and_billing_skip_tracked_runs(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run = Run.objects.get(pk=tracked["info"]["run_id"])
    budget = Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("100"))
    # Running: it reserves nothing of the budget, and no pass ever sees it queued.
    assert budgets_reserved(budgets=[budget])[budget.pk] == Decimal("0")
    # A budget that stops running work at 100% has nothing of it to stop.
    asked: list[int] = []
    assert budget_stop_running(budget_id=budget.pk, cancel=lambda *, run, user: asked.append(run.pk)) == [] and asked == []
    assert not snapshot.queued_runs(lock=False).filter(pk=run.pk).exists()
    # Finished: its runtime never feeds the scheduler's predictions.
    alice.post("runs/update", {"run_id": str(run.pk), "status": "FINISHED"})
    observed: list[Any] = []
    original = snapshot.RuntimePredictor.observe

    def spy(self: Any, finished: Any) -> None:
        observed.append(finished)
        original(self, finished)

    snapshot.RuntimePredictor.observe = spy  # type: ignore[method-assign]
    try:
        snapshot.predictor_load(now=timezone.now() + timedelta(seconds=1))
    finally:
        snapshot.RuntimePredictor.observe = original  # type: ignore[method-assign]
    assert all(f.job_type != TRACKED_TEMPLATE for f in observed)


def test_non_finite_metric_values_round_trip(alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    metrics = [{"key": "g", "value": v, "timestamp": 1, "step": i} for i, v in enumerate(["Infinity", "-Infinity", 2.5])]
    assert alice.post("runs/log-batch", {"run_id": run_id, "metrics": metrics}).status_code == 200
    values = [m["value"] for m in alice.get("metrics/get-history", run_id=run_id, metric_key="g").json()["metrics"]]
    assert values == ["Infinity", "-Infinity", 2.5] and not math.isnan(2.5)


def test_scheduled_runs_are_read_only_here(cast: Any, alice: Mlflow) -> None:
    from apps.runs.services.submit import run_submit
    from tests.runs.factories import GOOD_TAGS, local_pool, make_template

    local_pool()
    make_template()
    run = run_submit(user=cast.alice, project=cast.digits, template="digits-classifier", params={"steps": 20}, tags=dict(GOOD_TAGS))
    assert alice.get("runs/get", run_id=str(run.pk)).json()["run"]["info"]["status"] == "SCHEDULED"
    error(alice.post("runs/log-metric", {"run_id": str(run.pk), "key": "loss", "value": 1, "step": 1}), 400, "INVALID_STATE")


def test_run_page_shows_a_tracked_run(cast: Any, alice: Mlflow, tracked: dict[str, Any], client: Any) -> None:
    run_id = tracked["info"]["run_id"]
    alice.post("runs/log-batch", {"run_id": run_id, "params": [{"key": "lr", "value": "0.01"}],
                                  "tags": [{"key": "stage", "value": "acceptance"}]})
    client.force_login(cast.alice)
    html = client.get(f"/runs/{run_id}/").content.decode()
    assert "stage=acceptance" in html and '<dd class="mono">0.01</dd>' in html and "mlflow-tracked" in html
    # Trainyard never ran it, so there is nothing to run again: no Rerun or Clone offered.
    assert 'id="rerun-button"' not in html and 'id="clone-link"' not in html and 'id="run-tracked"' in html
    client.force_login(cast.bob)
    assert client.get(f"/runs/{run_id}/").status_code == 404


def test_artifact_proxy_stores_lists_and_serves(cast: Any, alice: Mlflow, tracked: dict[str, Any], settings: Any,
                                                tmp_path: Any) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    root = "/mlflow/api/2.0/mlflow-artifacts/artifacts"
    where = tracked["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")
    body = b'{"not": "checked as a request body"}' + bytes(range(256))
    put = alice.client.put(f"{root}/{where}/eval/report.json", body, content_type="application/json", headers=alice.headers)
    assert put.status_code == 200, put.content
    listing = alice.client.get(root, {"path": where}, headers=alice.headers).json()
    assert listing == {"files": [{"path": "eval", "is_dir": True}]}
    listing = alice.client.get(root, {"path": f"{where}/eval"}, headers=alice.headers).json()
    assert listing == {"files": [{"path": "report.json", "is_dir": False, "file_size": len(body)}]}
    got = alice.client.get(f"{root}/{where}/eval/report.json", headers=alice.headers)
    assert got.status_code == 200 and b"".join(got.streaming_content) == body
    error(alice.client.get(f"{root}/{where}/eval/missing.bin", headers=alice.headers), 404, "RESOURCE_DOES_NOT_EXIST")
    error(alice.client.put(f"{root}/{where}/../x", b"x", content_type="text/plain", headers=alice.headers), 400,
          "INVALID_PARAMETER_VALUE")

    bob, victor = Mlflow(cast.bob), Mlflow(cast.victor)
    error(bob.client.get(f"{root}/{where}/eval/report.json", headers=bob.headers), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.client.get(root, {"path": where}, headers=bob.headers), 404, "RESOURCE_DOES_NOT_EXIST")
    error(bob.client.put(f"{root}/{where}/eval/report.json", b"bob", content_type="text/plain", headers=bob.headers), 404,
          "RESOURCE_DOES_NOT_EXIST")
    error(victor.client.put(f"{root}/{where}/eval/report.json", b"v", content_type="text/plain", headers=victor.headers), 403,
          "PERMISSION_DENIED")
    wrong_experiment = where.replace(f"{cast.digits.pk}/", f"{cast.tinylm.pk}/", 1)
    error(alice.client.get(f"{root}/{wrong_experiment}/eval/report.json", headers=alice.headers), 404, "RESOURCE_DOES_NOT_EXIST")
    error(Mlflow(None).client.get(f"{root}/{where}/eval/report.json"), 401, "UNAUTHENTICATED")


def test_values_at_one_step_are_all_kept(alice: Mlflow, tracked: dict[str, Any]) -> None:
    """MLflow keeps every value logged at a step (log_metric without a step logs step 0): the
    history returns them all, by timestamp; the step's point (charts, latest) is the latest one."""
    run_id = tracked["info"]["run_id"]
    for value, timestamp in ((0.5, 1_000), (0.7, 3_000), (0.6, 2_000)):
        assert alice.post("runs/log-metric", {"run_id": run_id, "key": "acc", "value": value, "timestamp": timestamp}).status_code == 200
    # The same step twice in one batch, and a client's retry of a value already stored.
    batch = [{"key": "acc", "value": v, "timestamp": t, "step": 1} for v, t in ((0.8, 4_000), (0.9, 5_000))]
    assert alice.post("runs/log-batch", {"run_id": run_id, "metrics": batch}).status_code == 200
    assert alice.post("runs/log-metric", {"run_id": run_id, "key": "acc", "value": 0.5, "timestamp": 1_000}).status_code == 200
    history = alice.get("metrics/get-history", run_id=run_id, metric_key="acc").json()["metrics"]
    assert [(m["step"], m["value"], m["timestamp"]) for m in history] == [
        (0, 0.5, 1_000), (0, 0.6, 2_000), (0, 0.7, 3_000), (1, 0.8, 4_000), (1, 0.9, 5_000)]
    page = alice.get("metrics/get-history", run_id=run_id, metric_key="acc", max_results=2, page_token="2").json()
    assert [m["value"] for m in page["metrics"]] == [0.7, 0.8] and page["next_page_token"] == "4"
    assert sorted(MetricPoint.objects.filter(run_id=run_id, key="acc").values_list("step", "value")) == [(0, 0.7), (1, 0.9)]
    latest = alice.get("runs/get", run_id=run_id).json()["run"]["data"]["metrics"]
    assert latest == [{"key": "acc", "value": 0.9, "timestamp": 5_000, "step": 1}]


def test_delete_and_restore_are_soft_audited_and_hide_from_search(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    digits = [str(cast.digits.pk)]

    def search(**extra: Any) -> list[str]:
        response = alice.post("runs/search", {"experiment_ids": digits, **extra})
        assert response.status_code == 200, response.content
        return [r["info"]["run_id"] for r in response.json()["runs"]]

    assert alice.post("runs/delete", {"run_id": run_id}).json() == {}
    assert Run.objects.filter(pk=run_id).exists()  # soft: the run and what it logged stay
    assert alice.get("runs/get", run_id=run_id).json()["run"]["info"]["lifecycle_stage"] == "deleted"
    assert search() == [] and search(run_view_type="ACTIVE_ONLY") == []
    assert search(run_view_type="DELETED_ONLY") == [run_id] and search(run_view_type="ALL") == [run_id]
    found = alice.post("runs/search", {"experiment_ids": digits, "run_view_type": "ALL"}).json()["runs"]
    assert found[0]["info"]["lifecycle_stage"] == "deleted"
    error(alice.post("runs/search", {"experiment_ids": digits, "run_view_type": "SOME"}), 400, "INVALID_PARAMETER_VALUE")
    # A deleted run takes no writes, as in MLflow; deleting it again changes nothing.
    error(alice.post("runs/log-metric", {"run_id": run_id, "key": "loss", "value": 1, "step": 1}), 400, "INVALID_PARAMETER_VALUE")
    assert alice.post("runs/delete", {"run_id": run_id}).status_code == 200
    assert list(AuditEvent.objects.filter(object_id=str(run_id), action__startswith="run.mlflow_").values_list("action", flat=True)) \
        == ["run.mlflow_deleted"]

    assert alice.post("runs/restore", {"run_id": run_id}).json() == {}
    assert alice.get("runs/get", run_id=run_id).json()["run"]["info"]["lifecycle_stage"] == "active"
    assert search() == [run_id] and search(run_view_type="DELETED_ONLY") == []
    assert alice.post("runs/log-metric", {"run_id": run_id, "key": "loss", "value": 1, "step": 1}).status_code == 200
    events = AuditEvent.objects.filter(object_id=str(run_id), action__startswith="run.mlflow_").order_by("pk")
    assert [(e.action, e.after["lifecycle_stage"], e.actor_id) for e in events] == [
        ("run.mlflow_deleted", "deleted", cast.alice.pk), ("run.mlflow_restored", "active", cast.alice.pk)]


def test_another_teams_run_cannot_be_deleted_or_restored(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    bob = Mlflow(cast.bob)
    error(bob.post("runs/delete", {"run_id": run_id}), 404, "RESOURCE_DOES_NOT_EXIST")
    assert alice.get("runs/get", run_id=run_id).json()["run"]["info"]["lifecycle_stage"] == "active"
    alice.post("runs/delete", {"run_id": run_id})
    error(bob.post("runs/restore", {"run_id": run_id}), 404, "RESOURCE_DOES_NOT_EXIST")
    error(Mlflow(cast.victor).post("runs/restore", {"run_id": run_id}), 403, "PERMISSION_DENIED")  # a viewer
    assert alice.get("runs/get", run_id=run_id).json()["run"]["info"]["lifecycle_stage"] == "deleted"
    error(alice.post("runs/delete", {"run_id": "999999"}), 404, "RESOURCE_DOES_NOT_EXIST")
