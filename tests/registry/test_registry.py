"""Model registry in-process: promotion needs a passing evaluate run, rollback restores the
previous production version, all audited and turned into webhook events (issue 32, acceptance 3);
tenancy, roles, threshold validation, stage rules, frozen lineage and cost per version."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client as PageClient

from apps.audit.models import AuditEvent
from apps.registry.models import ModelVersion
from apps.runs.models import RunStatus
from apps.webhooks.models import WebhookDelivery, WebhookEvent
from tests.registry.factories import artifact, evaluate_run, spend, train_run

pytestmark = pytest.mark.django_db

THRESHOLDS = [{"metric": "val_accuracy", "op": ">=", "value": 0.9}, {"metric": "val_loss", "op": "<", "value": 0.5}]


def create_model(cast: Any, name: str = "digits-classifier", thresholds: Any = None) -> dict[str, Any]:
    body = {"project": "vision/digits", "name": name, "description": "Digits MLP",
            "thresholds": THRESHOLDS if thresholds is None else thresholds}
    response = cast.client(cast.alice).post("/api/v1/models/", body, format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def register(cast: Any, model_id: int, checkpoint_id: int, user: Any = None) -> Any:
    return cast.client(user or cast.alice).post(f"/api/v1/models/{model_id}/versions/", {"checkpoint": checkpoint_id}, format="json")


def test_promotion_needs_a_passing_evaluate_run_and_rollback_restores_the_previous_version(cast: Any) -> None:
    alice = cast.client(cast.alice)
    hook = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://example.com/hook",
                                            "events": ["model.promoted", "model.rolled_back"]}, format="json")
    assert hook.status_code == 201, hook.json()
    model = create_model(cast)
    run, (ckpt_a, ckpt_b) = train_run(cast.digits)
    v1 = register(cast, model["id"], ckpt_a.pk)
    assert v1.status_code == 201 and v1.json()["number"] == 1 and v1.json()["stage"] == "candidate"
    promote_v1 = f"/api/v1/models/{model['id']}/versions/1/promote/"

    # No evaluate run at all: refused, saying what is missing.
    refused = alice.post(promote_v1, {}, format="json")
    assert refused.status_code == 409 and "no succeeded evaluate run" in refused.json()["error"]["message"]
    # A failed evaluate run with good figures does not count; a succeeded one below the bar names the figure.
    evaluate_run(cast.digits, ckpt_a, metrics={"val_accuracy": 0.97, "val_loss": 0.1}, status=RunStatus.FAILED)
    weak = evaluate_run(cast.digits, ckpt_a, metrics={"val_accuracy": 0.85, "val_loss": 0.2})
    refused = alice.post(promote_v1, {}, format="json")
    assert refused.status_code == 400, refused.json()
    error = refused.json()["error"]
    assert error["code"] == "thresholds_unmet" and f"evaluate run {weak.pk}" in error["message"]
    assert error["fields"]["thresholds"] == ["val_accuracy >= 0.9 (got 0.85)"]
    assert ModelVersion.objects.get(model_id=model["id"], number=1).stage == "candidate"

    good = evaluate_run(cast.digits, ckpt_a, metrics={"val_accuracy": 0.93, "val_loss": 0.3})
    promoted = alice.post(promote_v1, {}, format="json")
    assert promoted.status_code == 200, promoted.json()
    assert promoted.json()["stage"] == "production" and promoted.json()["evidence_run"] == good.pk
    assert {c["metric"]: c["actual"] for c in promoted.json()["evidence"]["checks"]} == {"val_accuracy": 0.93, "val_loss": 0.3}

    # v2 on its own evidence replaces v1, which is archived.
    assert register(cast, model["id"], ckpt_b.pk).status_code == 201
    good_b = evaluate_run(cast.digits, ckpt_b, metrics={"val_accuracy": 0.96, "val_loss": 0.2})
    promoted = alice.post(f"/api/v1/models/{model['id']}/versions/2/promote/", {"evidence_run": good_b.pk}, format="json")
    assert promoted.status_code == 200 and promoted.json()["replaced"] == 1
    detail = alice.get(f"/api/v1/models/{model['id']}/").json()
    assert detail["production"] == 2 and {v["number"]: v["stage"] for v in detail["versions"]} == {1: "archived", 2: "production"}

    rolled = alice.post(f"/api/v1/models/{model['id']}/rollback/", {}, format="json")
    assert rolled.status_code == 200 and rolled.json()["number"] == 1 and rolled.json()["stage"] == "production"
    detail = alice.get(f"/api/v1/models/{model['id']}/").json()
    assert detail["production"] == 1 and {v["number"]: v["stage"] for v in detail["versions"]} == {1: "production", 2: "archived"}
    # v1 replaced nothing: a second rollback has nowhere to go.
    assert alice.post(f"/api/v1/models/{model['id']}/rollback/", {}, format="json").status_code == 409

    promotions = [(e.actor_label, e.after or {}) for e in AuditEvent.objects.filter(action="model.promoted").order_by("pk")]
    assert [(who, after["version"], after["evidence_run"]) for who, after in promotions] == [
        ("alice", 1, good.pk), ("alice", 2, good_b.pk)]
    assert promotions[0][1]["figures"][0] == {"metric": "val_accuracy", "op": ">=", "value": 0.9, "actual": 0.93, "met": True}
    rollback = AuditEvent.objects.get(action="model.rolled_back")
    assert rollback.actor_label == "alice" and (rollback.after or {}).get("version") == 1
    assert (rollback.after or {}).get("from_version") == 2
    assert AuditEvent.objects.filter(action="model.stage_change", after__stage="archived").count() == 2

    events = list(WebhookEvent.objects.filter(type__startswith="model.").order_by("created_at"))
    assert [(e.type, e.payload["version"]["number"]) for e in events] == [
        ("model.promoted", 1), ("model.promoted", 2), ("model.rolled_back", 1)]
    assert events[0].payload["evidence_run"] == good.pk and events[0].payload["model"]["name"] == "digits-classifier"
    assert events[2].payload["previous_version"] == 2
    assert WebhookDelivery.objects.filter(endpoint_id=hook.json()["id"], event__in=events).count() == 3


def test_another_teams_model_is_absent_and_viewers_only_read(cast: Any) -> None:
    model = create_model(cast)
    _, (ckpt, _) = train_run(cast.digits)
    assert register(cast, model["id"], ckpt.pk).status_code == 201
    bob = cast.client(cast.bob)
    assert bob.get(f"/api/v1/models/{model['id']}/").status_code == 404
    assert bob.get("/api/v1/models/").json()["results"] == []
    assert bob.post(f"/api/v1/models/{model['id']}/versions/1/promote/", {}, format="json").status_code == 404
    assert bob.post(f"/api/v1/models/{model['id']}/rollback/", {}, format="json").status_code == 404
    assert bob.post(f"/api/v1/models/{model['id']}/versions/", {"checkpoint": ckpt.pk}, format="json").status_code == 404
    stolen = bob.post("/api/v1/models/", {"project": "vision/digits", "name": "x"}, format="json")
    assert stolen.status_code == 400 and "project" in stolen.json()["error"]["fields"]
    assert PageClient().get(f"/models/{model['id']}/").status_code == 302  # to the login page
    page = PageClient()
    page.force_login(cast.bob)
    assert page.get(f"/models/{model['id']}/").status_code == 404
    assert page.post(f"/models/{model['id']}/rollback/").status_code == 404

    # Another project's checkpoint and evidence read as absent: a 400 naming the field.
    _, (nlp_ckpt, _) = train_run(cast.tinylm)
    foreign = register(cast, model["id"], nlp_ckpt.pk)
    assert foreign.status_code == 400 and "checkpoint" in foreign.json()["error"]["fields"]
    nlp_eval = evaluate_run(cast.tinylm, nlp_ckpt, metrics={"val_accuracy": 1.0, "val_loss": 0.0})
    refused = cast.client(cast.alice).post(f"/api/v1/models/{model['id']}/versions/1/promote/", {"evidence_run": nlp_eval.pk},
                                           format="json")
    assert refused.status_code == 400 and "evidence_run" in refused.json()["error"]["fields"]

    victor = cast.client(cast.victor)
    assert victor.get(f"/api/v1/models/{model['id']}/").json()["versions"][0]["number"] == 1
    assert victor.post("/api/v1/models/", {"project": "vision/digits", "name": "v"}, format="json").status_code == 403
    assert victor.post(f"/api/v1/models/{model['id']}/versions/1/promote/", {}, format="json").status_code == 403
    assert victor.post(f"/api/v1/models/{model['id']}/versions/1/stage/", {"stage": "staging"}, format="json").status_code == 403


@pytest.mark.parametrize(("thresholds", "field"), [
    ("val_accuracy >= 0.9", "thresholds"),
    ([{"metric": "val_accuracy", "op": "~", "value": 0.9}], "thresholds[0].op"),
    ([{"metric": "val_accuracy", "op": ">=", "value": "high"}], "thresholds[0].value"),
    ([{"metric": "val_accuracy", "op": ">=", "value": True}], "thresholds[0].value"),
    ([{"metric": "val_accuracy", "op": ">=", "value": 0.9}, {"metric": " ", "op": "<", "value": 1}], "thresholds[1].metric"),
    ([{"metric": "val_accuracy", "op": ">=", "value": 0.9, "weight": 2}], "thresholds[0]"),
])
def test_bad_thresholds_are_a_400_naming_the_field(cast: Any, thresholds: Any, field: str) -> None:
    alice = cast.client(cast.alice)
    response = alice.post("/api/v1/models/", {"project": "vision/digits", "name": "m", "thresholds": thresholds}, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"], response.json()
    model = create_model(cast)
    response = alice.patch(f"/api/v1/models/{model['id']}/", {"thresholds": thresholds}, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"], response.json()


def test_model_names_and_evidence_rules(cast: Any) -> None:
    alice = cast.client(cast.alice)
    model = create_model(cast)
    again = alice.post("/api/v1/models/", {"project": "vision/digits", "name": "digits-classifier"}, format="json")
    assert again.status_code == 400 and "name" in again.json()["error"]["fields"]
    changed = alice.patch(f"/api/v1/models/{model['id']}/", {"thresholds": [{"metric": "val_accuracy", "op": ">", "value": 0.5}]},
                          format="json")
    assert changed.status_code == 200 and changed.json()["thresholds"] == [{"metric": "val_accuracy", "op": ">", "value": 0.5}]
    assert AuditEvent.objects.filter(action="model.update", object_id=str(model["id"])).exists()

    train, (ckpt_a, ckpt_b) = train_run(cast.digits)
    # A run alone registers its latest checkpoint.
    by_run = alice.post(f"/api/v1/models/{model['id']}/versions/", {"run": train.pk}, format="json")
    assert by_run.status_code == 201 and by_run.json()["checkpoint"] == ckpt_b.pk
    assert register(cast, model["id"], ckpt_a.pk).json()["number"] == 2
    promote_v2 = f"/api/v1/models/{model['id']}/versions/2/promote/"
    of_other = evaluate_run(cast.digits, ckpt_b, metrics={"val_accuracy": 0.99})
    wrong = alice.post(promote_v2, {"evidence_run": of_other.pk}, format="json")
    assert wrong.status_code == 400 and f"checkpoint {ckpt_a.pk}" in wrong.json()["error"]["fields"]["evidence_run"][0]
    not_eval = alice.post(promote_v2, {"evidence_run": train.pk}, format="json")
    assert not_eval.status_code == 400 and "evaluate run" in not_eval.json()["error"]["fields"]["evidence_run"][0]
    missing = evaluate_run(cast.digits, ckpt_a, metrics={"val_loss": 0.1})
    unmet = alice.post(promote_v2, {"evidence_run": missing.pk}, format="json")
    assert unmet.status_code == 400 and unmet.json()["error"]["fields"]["thresholds"] == ["val_accuracy > 0.5 (got not reported)"]

    # Stages by hand: not production, and not away from production.
    stage = f"/api/v1/models/{model['id']}/versions/1/stage/"
    assert alice.post(stage, {"stage": "production"}, format="json").status_code == 400
    assert alice.post(stage, {"stage": "retired"}, format="json").json()["error"]["fields"]["stage"]
    staged = alice.post(stage, {"stage": "staging"}, format="json")
    assert staged.status_code == 200 and staged.json()["stage"] == "staging"
    assert AuditEvent.objects.filter(action="model.stage_change", before__stage="candidate", after__stage="staging").exists()
    assert alice.post(f"/api/v1/models/{model['id']}/versions/1/promote/", {}, format="json").status_code == 200
    assert alice.post(stage, {"stage": "archived"}, format="json").status_code == 409
    assert alice.post(f"/api/v1/models/{model['id']}/versions/1/promote/", {}, format="json").status_code == 409
    assert alice.post(f"/api/v1/models/{model['id']}/versions/9/promote/", {}, format="json").status_code == 404


def test_version_keeps_the_runs_lineage_and_costs_its_familys_spend(cast: Any) -> None:
    model = create_model(cast)
    train, (ckpt, _) = train_run(cast.digits, family="digits-mlp")
    sibling, _ = train_run(cast.digits, family="digits-mlp", name="sibling")
    other, _ = train_run(cast.digits, family="digits-cnn", name="other")
    spend(train, "1.25")
    spend(sibling, "0.50")
    spend(other, "9.00")
    version = register(cast, model["id"], ckpt.pk).json()
    assert version["lineage"]["run"]["id"] == train.pk and version["lineage"]["run"]["family"] == "digits-mlp"
    assert version["lineage"]["checkpoint"]["sha256"] == ckpt.sha256 and version["lineage"]["template"].startswith("registry-train")
    train.params = {"lr": 1.0}
    train.save(update_fields=["params"])
    assert cast.client(cast.alice).get(f"/api/v1/models/{model['id']}/versions/1/").json()["lineage"]["run"]["params"] == {"lr": 0.003}
    assert version["cost"] == "1.75"

    rows = cast.client(cast.carol).get("/api/v1/model-costs/").json()
    assert [(r["project"], r["model"], r["version"], r["family"], r["cost"]) for r in rows] == [
        ("vision/digits", "digits-classifier", 1, "digits-mlp", "1.75")]
    assert cast.client(cast.bob).get("/api/v1/model-costs/").json() == []


def test_model_page_and_run_card(cast: Any) -> None:
    model = create_model(cast)
    train, (ckpt, _) = train_run(cast.digits)
    spend(train, "2.00")
    page = PageClient()
    page.force_login(cast.alice)
    card = page.get(f"/runs/{train.pk}/").content.decode()
    assert "Register checkpoint as a model version" in card and "digits-classifier" in card
    created = page.post(f"/runs/{train.pk}/register-model-version/", {"model": model["id"], "checkpoint": ckpt.pk})
    assert created.status_code == 302 and created["Location"] == f"/models/{model['id']}/"
    evaluate_run(cast.digits, ckpt, metrics={"val_accuracy": 0.95, "val_loss": 0.1})
    html = page.get(f"/models/{model['id']}/").content.decode()
    assert "v1" in html and "candidate" in html and "$2.00" in html and 'id="promote-1"' in html and "0.9500" in html
    assert page.post(f"/models/{model['id']}/versions/1/promote/").status_code == 302
    html = page.get(f"/models/{model['id']}/").content.decode()
    assert "status-succeeded" in html and "production" in html
    listing = page.get(f"/projects/{cast.digits.pk}/").content.decode()
    assert f"/models/{model['id']}/" in listing and "production v1" in listing
    created = page.post(f"/projects/{cast.digits.pk}/models/new/", {"name": "second", "metric": ["acc", ""], "op": [">=", ">="],
                                                                   "value": ["0.8", ""]})
    assert created.status_code == 302
    listing = page.get(f"/projects/{cast.digits.pk}/models/").content.decode()
    assert "second" in listing and "<code>acc &gt;= 0.8</code>" in listing and "digits-classifier" in listing
    bad = page.post(f"/projects/{cast.digits.pk}/models/new/", {"name": "third", "metric": ["acc"], "op": ["~"], "value": ["x"]},
                    follow=True)
    assert "thresholds[0].op" in bad.content.decode() and not ModelVersion.objects.filter(model__name="third").exists()
    viewer = PageClient()
    viewer.force_login(cast.victor)
    html = viewer.get(f"/models/{model['id']}/").content.decode()
    assert "promote-1" not in html and "Versions" in html


def test_an_artifact_version_is_promoted_on_an_evaluate_run_tagged_with_it(cast: Any) -> None:
    alice = cast.client(cast.alice)
    model = create_model(cast, thresholds=[{"metric": "val_accuracy", "op": ">=", "value": 0.9}])
    train, (ckpt, _) = train_run(cast.digits)
    weights = artifact(train)
    both = alice.post(f"/api/v1/models/{model['id']}/versions/", {"checkpoint": ckpt.pk, "artifact": weights.pk}, format="json")
    assert both.status_code == 400 and "artifact" in both.json()["error"]["fields"]
    nlp_train, _ = train_run(cast.tinylm)
    foreign = alice.post(f"/api/v1/models/{model['id']}/versions/", {"artifact": artifact(nlp_train).pk}, format="json")
    assert foreign.status_code == 400 and "artifact" in foreign.json()["error"]["fields"]

    created = alice.post(f"/api/v1/models/{model['id']}/versions/", {"artifact": weights.pk}, format="json")
    assert created.status_code == 201 and created.json()["artifact"] == weights.pk and created.json()["checkpoint"] is None
    assert created.json()["lineage"]["artifact"]["sha256"] == weights.sha256
    promote = f"/api/v1/models/{model['id']}/versions/1/promote/"
    # Its checkpoint's evaluation is not this version's.
    evaluate_run(cast.digits, ckpt, metrics={"val_accuracy": 0.99})
    refused = alice.post(promote, {}, format="json")
    assert refused.status_code == 409 and '"model_artifact"' in refused.json()["error"]["message"]
    good = evaluate_run(cast.digits, None, metrics={"val_accuracy": 0.91}, tags={"model_artifact": str(weights.pk)})
    promoted = alice.post(promote, {}, format="json")
    assert promoted.status_code == 200 and promoted.json()["evidence_run"] == good.pk

    page = PageClient()
    page.force_login(cast.alice)
    card = page.get(f"/runs/{train.pk}/").content.decode()
    assert f'value="artifact:{weights.pk}"' in card and "digits-classifier v1" in card
    posted = page.post(f"/runs/{train.pk}/register-model-version/", {"model": model["id"], "source": f"artifact:{weights.pk}"})
    assert posted.status_code == 302
    assert ModelVersion.objects.get(model_id=model["id"], number=2).artifact_id == weights.pk
    assert "model/model.safetensors" in page.get(f"/models/{model['id']}/").content.decode()
