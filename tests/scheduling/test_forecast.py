"""POST /api/v1/queue/forecast/: where a run would stand and when it would start if submitted now,
from the same core and estimator as the passes, without writing anything."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from apps.audit.models import AuditEvent
from apps.billing.models import Budget
from apps.runs.models import Run
from apps.scheduling.models import QueueEstimate
from apps.scheduling.services import scheduling_pass
from tests.agents.server import register
from tests.runs.factories import body, local_pool, make_template

URL = "/api/v1/queue/forecast/"


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_forecast_says_at_once_then_where_in_line_and_matches_what_the_pass_does(cast: Any) -> None:
    pool = local_pool()
    make_template()
    register(pool, "n1", slots=1)
    client = cast.client(cast.alice)

    empty = client.post(URL, body(cast), format="json")
    assert empty.status_code == 200, empty.content
    assert empty.json()["starts_now"] and empty.json()["position"] == 0
    assert empty.json()["summary"].startswith("Would start at once")

    first = client.post("/api/v1/runs/", body(cast), format="json").json()
    scheduling_pass()
    assert Run.objects.get(pk=first["id"]).status == "scheduled"
    second = client.post("/api/v1/runs/", body(cast), format="json").json()
    scheduling_pass()
    counts = (Run.objects.count(), QueueEstimate.objects.count(), AuditEvent.objects.count())

    answer = client.post(URL, body(cast), format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert not data["starts_now"] and (data["position"], data["ahead"]) == (2, 1)
    assert data["reason"]["code"] == "behind_earlier_jobs" and data["reason"]["message"]
    assert data["runtime_basis"] == "template maximum" and data["predicted_runtime_s"] == 1800
    est = data["estimated_start"]
    assert _at(est["low"]) <= _at(est["at"]) <= _at(est["high"])
    assert "2nd in line in pool local" in data["summary"] and "estimated start in" in data["summary"]
    # A run predicted shorter gets a nearer virtual deadline, but the waiting run's first estimate
    # is its promise (`Policy.promise_estimates`), nearer still: the short one would go behind it.
    short = client.post(URL, body(cast, resources={"max_runtime_s": 600}), format="json").json()
    assert (short["position"], short["predicted_runtime_s"]) == (2, 600)
    assert abs((_at(short["estimated_start"]["at"]) - _at(est["at"])).total_seconds()) < 30
    # A forecast writes nothing: no run, no estimate row, no audit event.
    assert (Run.objects.count(), QueueEstimate.objects.count(), AuditEvent.objects.count()) == counts

    # Submitted for real, the run gets the place and (within a pass's drift) the start foreseen.
    third = client.post("/api/v1/runs/", body(cast), format="json").json()
    scheduling_pass()
    run = Run.objects.get(pk=third["id"])
    assert run.queue_position == 2 and run.estimated_start is not None
    assert abs((run.estimated_start - _at(est["at"])).total_seconds()) < 30
    assert Run.objects.get(pk=second["id"]).queue_position == 1


def test_forecast_names_bad_fields_and_budget_stops(cast: Any) -> None:
    pool = local_pool()
    make_template()
    register(pool, "n1", slots=2)
    alice = cast.client(cast.alice)
    too_wide = alice.post(URL, body(cast, resources={"devices_per_node": 3}), format="json")
    assert too_wide.status_code == 400 and "resources.devices_per_node" in too_wide.json()["error"]["fields"]
    bad = alice.post(URL, body(cast, priority="asap", params={"steps": 0}), format="json")
    assert bad.status_code == 400 and {"priority", "params.steps"} <= set(bad.json()["error"]["fields"])
    # Another team's project reads exactly like one that does not exist.
    theirs = cast.client(cast.bob).post(URL, body(cast), format="json")
    missing = alice.post(URL, body(cast, project=999999), format="json")
    assert theirs.status_code == missing.status_code == 400
    assert theirs.json()["error"]["message"].replace(f"'{cast.digits.pk}'", "'?'") == missing.json()["error"]["message"].replace(
        "'999999'", "'?'")
    assert cast.client(None).post(URL, body(cast), format="json").status_code in (401, 403)

    Budget.objects.create(team=cast.vision, project=cast.digits, amount=0)
    # With tags it is a dry run, refused as the submission would be (issue 29); without, a
    # forecast that says so in the submission's words (tests/runs/test_forecast_budget.py).
    refused = alice.post(URL, body(cast), format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "budget_exceeded"
    place = {k: v for k, v in body(cast).items() if k != "tags"}
    broke = alice.post(URL, place, format="json").json()
    assert not broke["starts_now"] and broke["reason"]["code"] == "budget" and broke["refused"]
    assert broke["reason"]["message"] == refused.json()["error"]["message"]
    assert broke["estimated_start"]["at"] is None and broke["summary"].startswith("Would be refused: Budget")


def test_forecast_for_a_pool_without_nodes_says_why(cast: Any) -> None:
    from apps.nodes.models import NodePool

    local_pool()
    NodePool.objects.create(name="empty")
    make_template(resources={"pool": "local", "pools": ["local", "empty"], "max_devices_per_node": 4})
    answer = cast.client(cast.alice).post(URL, body(cast, resources={"pool": "empty"}), format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert not data["starts_now"] and data["position"] == 1 and data["pool"] == "empty"
    assert data["reason"]["code"] in ("unknown_pool", "no_hardware") and data["estimated_start"]["at"] is None


def test_a_dry_run_with_tags_is_refused_where_the_submission_would_be(cast: Any) -> None:
    pool = local_pool()
    make_template()
    make_template(slug="finetune", kind="fine-tune")
    register(pool, "n1", slots=1)
    alice = cast.client(cast.alice)
    untagged = alice.post(URL, body(cast, tags={}), format="json")
    submitted = alice.post("/api/v1/runs/", body(cast, tags={}), format="json")
    assert untagged.status_code == submitted.status_code == 400
    assert untagged.json()["error"]["fields"] == submitted.json()["error"]["fields"] and "tags.task" in untagged.json()["error"]["fields"]
    no_start = alice.post(URL, body(cast, template="finetune"), format="json")
    assert no_start.status_code == 400 and "required for fine-tune templates" in no_start.json()["error"]["fields"]["init_run"][0]
    nowhere = alice.post(URL, body(cast, template="finetune", init_run="99999"), format="json")
    assert nowhere.json()["error"]["fields"] == {"init_run": ["no such run 99999"]}
    # Without tags (the submit page asking while the form is half filled) only the place in line is checked.
    half = {k: v for k, v in body(cast, template="finetune").items() if k != "tags"}
    assert alice.post(URL, half, format="json").status_code == 200
    assert Run.objects.count() == 0


def test_forecast_without_tags_refuses_a_parameter_the_schema_refuses(cast: Any) -> None:
    """The submit page asks while tags may be half typed; lr=5 must not read "start at once"
    (issue 29): static/runs/submit.js sends every numeric parameter, and the answer names it."""
    pool = local_pool()
    make_template()
    register(pool, "n1", slots=1)
    alice = cast.client(cast.alice)
    untagged = {k: v for k, v in body(cast, params={"steps": 20, "lr": 5}).items() if k != "tags"}
    answer = alice.post(URL, untagged, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["fields"] == {"params.lr": ["must be ≤ 1.0 (got 5)"]}
    assert alice.post(URL, {**untagged, "params": {"steps": 20, "lr": 0.01}}, format="json").status_code == 200
