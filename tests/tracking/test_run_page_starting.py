"""Issue 29 item 3: the run page shows a starting phase — placed on a node, claimed by its agent,
process started, first metric — with each step's time, for the current attempt, and says
which step it waits for while it starts; then rate and ETA from the first progress report.
The steps are driven through the services the agent protocol calls; the page and the JSON
its script polls (static/tracking/run.js) are read through Django's test client."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.runs.services.assignments import assignment_claim
from apps.runs.services.lifecycle import assignment_started
from apps.runs.services.reports import attempt_progress_record
from apps.tracking.services import metric_points_store
from apps.tracking.startup_selectors import run_starting
from tests.tracking.conftest import make_node, make_run


def _placed(cast: Any, *, number: int = 1, **fields: Any) -> tuple[Run, Attempt, Assignment]:
    run = make_run(cast.digits, status=RunStatus.SCHEDULED, total_steps=300, **fields)
    node, _ = make_node()
    attempt = Attempt.objects.create(run=run, number=number)
    assignment = Assignment.objects.create(attempt=attempt, node=node, devices=[0])
    return run, attempt, assignment


def _page(user: Any, run: Run) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def _starting(cast: Any, run: Run) -> dict[str, Any]:
    response = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/metrics/keys/")
    assert response.status_code == 200
    return dict(response.json()["run"]["starting"])


def test_each_step_of_the_start_up_is_named_with_its_time(cast: Any) -> None:
    run, attempt, assignment = _placed(cast)
    node = assignment.node
    s = _starting(cast, run)
    assert [step["key"] for step in s["steps"]] == ["placed", "claimed", "started", "first_report"]
    assert s["starting"] and s["waiting_for"] == "claimed" and s["attempt"] == 1
    assert s["steps"][0]["at"] is not None and s["steps"][0]["detail"] == node.hostname
    assert s["text"].startswith("Starting: placed on node ") and s["text"].endswith("ago, waiting for the node's agent to claim it.")

    assert assignment_claim(assignment=assignment, hostname=node.hostname)
    assert _starting(cast, run)["waiting_for"] == "started"

    assignment_started(attempt_id=attempt.pk, node_id=node.pk, node_rank=0)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    s = _starting(cast, run)
    assert s["starting"] and s["waiting_for"] == "first_report"
    assert s["text"].startswith("Starting: process started ") and s["text"].endswith(" ago, waiting for the first metric.")
    assert [step["at"] is not None for step in s["steps"]] == [True, True, True, False]
    # The page as served says the same, before its script's first poll.
    page = _page(cast.alice, run)
    assert 'id="run-starting" class="run-starting is-starting"' in page
    assert "waiting for the first metric" in page and 'data-step="first_report"' in page

    attempt.refresh_from_db()
    attempt_progress_record(attempt=attempt, steps_done=10)
    s = _starting(cast, run)
    assert not s["starting"] and s["waiting_for"] is None
    assert all(step["at"] is not None for step in s["steps"])
    assert s["text"].startswith("Attempt 1 started: first metric ") and "after the process started" in s["text"]
    after = [step["after_s"] for step in s["steps"]]
    assert after[0] is None and all(a is not None and a >= 0 for a in after[1:])


def test_the_first_metric_point_counts_as_the_first_report(cast: Any) -> None:
    run, attempt, assignment = _placed(cast)
    assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=0)
    logged = timezone.now() + timedelta(seconds=3)
    metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", 0, 2.5, 0, logged.timestamp())])
    run.refresh_from_db()
    s = run_starting(run=run)
    assert s is not None and not s["starting"]
    assert abs((s["steps"][3]["at"] - logged).total_seconds()) < 1e-3


def test_a_retry_waits_for_its_own_first_metric(cast: Any) -> None:
    """Attempt 2 after a preemption: attempt 1's metrics and progress do not count for it."""
    run, first, assignment = _placed(cast)
    earlier = timezone.now() - timedelta(minutes=5)
    metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", 0, 2.5, 0, earlier.timestamp())])
    Run.objects.filter(pk=run.pk).update(progress_from_at=earlier, progress_from_step=0, progress_at=earlier, steps_done=50)
    Attempt.objects.filter(pk=first.pk).update(status="preempted", ended_at=earlier + timedelta(minutes=1))
    second = Attempt.objects.create(run=run, number=2)
    Assignment.objects.create(attempt=second, node=assignment.node, devices=[0])
    assignment_started(attempt_id=second.pk, node_id=assignment.node_id, node_rank=0)
    run.refresh_from_db()
    s = run_starting(run=run)
    assert s is not None and s["attempt"] == 2 and s["starting"] and s["waiting_for"] == "first_report"
    second.refresh_from_db()
    attempt_progress_record(attempt=second, steps_done=60)
    run.refresh_from_db()
    s = run_starting(run=run)
    assert s is not None and not s["starting"] and s["text"].startswith("Attempt 2 started")


def test_an_attempt_that_ended_before_its_first_metric_says_so(cast: Any) -> None:
    run, attempt, assignment = _placed(cast)
    assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=0)
    Attempt.objects.filter(pk=attempt.pk).update(status="failed", ended_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    run.refresh_from_db()
    s = run_starting(run=run)
    assert s is not None and not s["starting"] and s["waiting_for"] is None
    assert s["text"] == "Attempt 1 ended (failed) before its first metric; last step: process started."


def test_no_starting_phase_before_placement(cast: Any) -> None:
    run = make_run(cast.digits, status=RunStatus.QUEUED)
    assert run_starting(run=run) is None
    assert _starting_or_none(cast, run) is None
    page = _page(cast.alice, run)
    # In place but hidden: the page's script shows it once the run is placed.
    assert '<div id="run-starting" class="run-starting" hidden>' in page


def _starting_or_none(cast: Any, run: Run) -> Any:
    return cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/metrics/keys/").json()["run"]["starting"]


def test_rate_and_eta_are_measured_from_the_first_progress_report(cast: Any) -> None:
    """Start-up (10 s here) does not count against the rate: 100 steps in the 5 s after the
    first report is 20 steps/s, and the 190 left take 9.5 s."""
    run, attempt, assignment = _placed(cast)
    assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=0)
    now = timezone.now()
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(seconds=15))
    Run.objects.filter(pk=run.pk).update(started_at=now - timedelta(seconds=15), progress_from_at=now - timedelta(seconds=5),
                                         progress_from_step=10, progress_at=now, steps_done=110)
    progress = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/metrics/keys/").json()["run"]["progress"]
    assert abs(progress["steps_per_s"] - 20.0) < 1e-6
    assert abs(progress["eta_s"] - 9.5) < 1e-6


def test_another_tenants_run_is_a_404(cast: Any) -> None:
    run, _, _ = _placed(cast)
    assert cast.client(cast.bob).get(f"/api/v1/runs/{run.pk}/metrics/keys/").status_code == 404


def test_a_run_that_succeeded_without_metrics_says_so(cast: Any) -> None:
    run, attempt, assignment = _placed(cast)
    assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=0)
    Attempt.objects.filter(pk=attempt.pk).update(status="succeeded", ended_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    run.refresh_from_db()
    s = run_starting(run=run)
    assert s is not None and s["text"] == "Attempt 1 succeeded without reporting a metric."


def test_the_placed_step_names_as_many_nodes_as_it_has(cast: Any) -> None:
    run, attempt, _ = _placed(cast)
    assert run_starting(run=run)["steps"][0]["title"] == "Placed on node"  # type: ignore[index]
    second, _ = make_node()
    Assignment.objects.create(attempt=attempt, node=second, devices=[0], node_rank=1)
    gang = run_starting(run=run)["steps"][0]  # type: ignore[index]
    assert gang["title"] == "Placed on nodes" and second.hostname in gang["detail"]
    # A demo attempt (seed_demo) has no assignment: not "Placed on node" with no node after it.
    bare = make_run(cast.digits, status=RunStatus.SCHEDULED, total_steps=300)
    Attempt.objects.create(run=bare, number=1)
    assert run_starting(run=bare)["steps"][0]["title"] == "Placed"  # type: ignore[index]
