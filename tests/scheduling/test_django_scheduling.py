"""The Django side of the scheduler, in-process: the pass applies the core's decisions to rows
(placements, preemptions, reasons in plain words, estimates and their errors), concurrent passes
never double-place, the queue API hides other teams' details, and the queue page renders."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from trainyard import _cli_reports, cli

from apps.billing.models import Budget, Quota
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool, NodeState
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment, Attempt, Run, RunStatus
from apps.runs.services.lifecycle import assignment_exited, assignment_started
from apps.scheduling.models import EstimateKind, QueueEstimate, SchedulerState, UtilizationSample
from apps.scheduling.selectors import estimate_accuracy, run_predicted_runtime
from apps.scheduling.services import scheduling_pass
from apps.scheduling.snapshot import snapshot_load
from tests.agents.server import register


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _template() -> JobTemplate:
    template, _ = JobTemplate.objects.get_or_create(slug="t", version=1, defaults={"title": "t", "kind": "custom", "entrypoint": "x"})
    return template


def make(cast: Any, pool: NodePool, *, team: str = "vision", priority: str = "normal", nodes: int = 1, dpn: int = 1,
         max_runtime_s: int = 600, **fields: Any) -> Run:
    project, user = (cast.digits, cast.alice) if team == "vision" else (cast.tinylm, cast.bob)
    return Run.objects.create(project=project, template=_template(), pool=pool, entrypoint="python x.py", nodes=nodes,
                              devices_per_node=dpn, priority=priority, submitted_by=user, name=f"{team}-{priority}",
                              max_runtime_s=max_runtime_s, queued_at=timezone.now(), **fields)


def start(run: Run) -> Attempt:
    attempt = Attempt.objects.filter(run=run).order_by("-number").first()
    assert attempt is not None
    for a in attempt.assignments.all():
        assignment_started(attempt_id=attempt.pk, node_id=a.node_id, node_rank=a.node_rank)
    return attempt


def exit_(run: Run, stop_kind: str | None = None) -> None:
    attempt = Attempt.objects.filter(run=run).order_by("-number").first()
    assert attempt is not None
    for a in attempt.assignments.all():
        assignment_exited(attempt_id=attempt.pk, node_id=a.node_id, node_rank=a.node_rank, exit_code=0, signal=None,
                          stop_kind=stop_kind)


def refresh(*runs: Run) -> None:
    for run in runs:
        run.refresh_from_db()


def test_urgent_run_preempts_borrowed_low_run_which_requeues(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    register(pool, "n2")
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=2)
    low1 = make(cast, pool, team="nlp", priority="low")
    low2 = make(cast, pool, team="nlp", priority="low")
    result = scheduling_pass()
    assert sorted(result.placed) == [low1.pk, low2.pk]
    start(low1), start(low2)
    refresh(low1, low2)
    deadlines = {low1.pk: low1.queue_deadline, low2.pk: low2.queue_deadline}
    assert None not in deadlines.values()

    urgent = make(cast, pool, team="vision", priority="urgent")
    result = scheduling_pass()
    assert result.placed == [] and len(result.preempted) == 1
    victim = Run.objects.get(pk=result.preempted[0])
    other = low2 if victim.pk == low1.pk else low1
    attempt = Attempt.objects.get(run=victim)
    assert attempt.stop_kind == "preempt"
    # The stopping attempt names the run it stops for, which has first claim on its devices.
    assert attempt.stopping_for_id == urgent.pk
    stopping = {r.id: r for r in snapshot_load(now=timezone.now(), lock=False).state.running}[str(victim.pk)]
    assert (stopping.stopping, stopping.stopping_for) == (True, str(urgent.pk))
    refresh(urgent, victim)
    assert urgent.reason_code == "preempting" and "Stopping 1 lower-priority run" in urgent.status_reason
    assert victim.reason_code == "preempting" and "team vision" in victim.status_reason
    # The victim's agent reports the exit after checkpointing: the run goes back in line.
    exit_(victim, stop_kind="preempt")
    victim.refresh_from_db()
    assert victim.status == RunStatus.QUEUED and victim.reason_code == "preempted"
    assert "preempted by the scheduler" in victim.status_reason

    result = scheduling_pass()
    assert result.placed == [urgent.pk]
    refresh(victim)
    assert victim.status == RunStatus.QUEUED and victim.queue_position == 1
    # Back in line with its place: the deadline it got on its first pass, not a new one.
    assert victim.queue_deadline == deadlines[victim.pk]
    assert victim.reason_code in {"waiting_for_resources", "behind_higher_priority"} and victim.status_reason
    # When the other low run ends, the preempted one resumes with a new attempt.
    start(urgent)
    exit_(other)
    assert scheduling_pass().placed == [victim.pk]
    assert Attempt.objects.filter(run=victim).count() == 2
    from apps.audit.models import AuditEvent

    labels = set(AuditEvent.objects.filter(action__in=["run.scheduled", "run.preempt"]).values_list("actor_label", flat=True))
    assert labels == {"scheduler"}
    assert AuditEvent.objects.filter(action="run.preempt", object_id=str(victim.pk)).exists()


def test_quota_and_budget_reasons_in_plain_words(cast: Any, pool: NodePool) -> None:
    register(pool, "n1", slots=4)
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=1, borrow_limit=0)
    first = make(cast, pool, team="nlp")
    second = make(cast, pool, team="nlp")
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=0)
    broke = make(cast, pool, team="vision")
    huge = make(cast, pool, team="nlp", dpn=8)
    result = scheduling_pass()
    assert result.placed == [first.pk]
    refresh(second, broke, huge)
    assert second.reason_code == "quota"
    assert "Team nlp holds 1 of the 1 devices it may use in pool local" in second.status_reason
    assert broke.reason_code == "budget" and "is used up" in broke.status_reason and "$0.00" in broke.status_reason
    assert huge.reason_code == "no_hardware" and "No ready node in pool local has 8 devices" in huge.status_reason
    assert Run.objects.get(pk=broke.pk).status == RunStatus.QUEUED
    [sample] = UtilizationSample.objects.all()
    assert (sample.total_devices, sample.used_devices, sample.free_devices) == (4, 1, 3)


def test_estimates_recorded_and_error_computed_on_start(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    running = make(cast, pool, max_runtime_s=300)
    assert scheduling_pass().placed == [running.pk]
    start(running)
    waiting = make(cast, pool, max_runtime_s=300)
    scheduling_pass()
    waiting.refresh_from_db()
    assert waiting.queue_position == 1 and waiting.estimated_start is not None
    assert waiting.estimated_start_low is not None and waiting.estimated_start_high is not None
    assert waiting.estimated_start_low <= waiting.estimated_start <= waiting.estimated_start_high
    [row] = QueueEstimate.objects.filter(run=waiting)
    assert row.kind == EstimateKind.AT_SUBMISSION and row.actual_start is None
    # A pass whose estimate did not move records no new history row.
    scheduling_pass()
    assert QueueEstimate.objects.filter(run=waiting).count() == 1
    exit_(running)
    assert scheduling_pass().placed == [waiting.pk]
    row.refresh_from_db()
    assert row.actual_start is not None and row.error_s is not None and row.estimated_start is not None
    assert abs(row.error_s - (row.actual_start - row.estimated_start).total_seconds()) < 1e-6
    # Placed by the next pass, it did not wait: not scored (issue 29). Given five minutes earlier, it is.
    assert estimate_accuracy(pool=pool)["runs"] == 0 and estimate_accuracy(pool=pool)["started_at_once"] == 1
    QueueEstimate.objects.filter(pk=row.pk).update(recorded_at=row.actual_start - timedelta(minutes=5))
    accuracy = estimate_accuracy(pool=pool)
    assert accuracy["runs"] == 1 and accuracy["median_abs_error_s"] == pytest.approx(abs(row.error_s))
    assert "of the 1 run that waited" in accuracy["summary"]


def test_deadline_fixed_by_the_first_pass_holds_the_place_when_history_arrives(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    # nlp holds the only device, so fair share stretches nlp's deadlines a little (x 1.15).
    blocker = make(cast, pool, team="nlp")
    assert scheduling_pass().placed == [blocker.pk]
    start(blocker)
    first = make(cast, pool, team="vision", max_runtime_s=600)
    second = make(cast, pool, team="nlp", max_runtime_s=600)
    scheduling_pass()
    refresh(first, second)
    assert first.queue_deadline is not None and second.queue_deadline is not None
    assert first.queue_deadline < second.queue_deadline and (first.queue_position, second.queue_position) == (1, 2)
    fixed = (first.queue_deadline, second.queue_deadline)
    # nlp's runs of this template turn out to take a minute: recomputed every pass, the nlp run's
    # deadline would now come first (submission + 6 x 60 s) and push the vision run back.
    now = timezone.now()
    for _ in range(3):
        make(cast, pool, team="nlp", status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=70),
             finished_at=now - timedelta(seconds=10))
    scheduling_pass()
    refresh(first, second)
    assert (first.queue_deadline, second.queue_deadline) == fixed
    assert (first.queue_position, second.queue_position) == (1, 2)


def _three_behind_a_blocker(cast: Any, pool: NodePool, monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    """Three runs queued behind one that holds the pool's only node, after a pass that replays
    only the front of the line (`MAX_AHEAD` 1)."""
    from apps.scheduling import services

    monkeypatch.setattr(services, "MAX_AHEAD", 1)
    register(pool, "n1")
    blocker = make(cast, pool)
    assert scheduling_pass().placed == [blocker.pk]
    start(blocker)
    waiting = [make(cast, pool) for _ in range(3)]
    scheduling_pass()
    refresh(*waiting)
    return waiting


def test_runs_far_back_are_placed_by_the_lag_of_recent_first_waits(cast: Any, pool: NodePool,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    django_assert_num_queries: Any) -> None:
    from apps.scheduling.model import Ordering, Policy
    from apps.scheduling.snapshot import lags_load

    now = timezone.now()
    started = now - timedelta(seconds=3600)
    for behind in (800, 100, 700, 200, 600, 300, 500, 400):
        sample = make(cast, pool, status=RunStatus.RUNNING, queue_deadline=started - timedelta(seconds=behind))
        QueueEstimate.objects.create(run=sample, recorded_at=started - timedelta(seconds=60), kind=EstimateKind.AT_SUBMISSION,
                                     actual_start=started)
    # A requeued run's second wait says nothing about today's line; nor does a start days ago.
    requeued = make(cast, pool, status=RunStatus.RUNNING, queue_deadline=now - timedelta(days=3))
    QueueEstimate.objects.create(run=requeued, recorded_at=now - timedelta(days=3), kind=EstimateKind.AT_SUBMISSION,
                                 actual_start=now - timedelta(days=2))
    placed = Attempt.objects.create(run=requeued, number=1)  # its first placement, before it went back in line
    Attempt.objects.filter(pk=placed.pk).update(created_at=now - timedelta(days=2))
    QueueEstimate.objects.create(run=requeued, recorded_at=now - timedelta(hours=2), kind=EstimateKind.AT_SUBMISSION,
                                 actual_start=now - timedelta(minutes=10))
    lag = lags_load(now=now, policies={"local": Policy(demote_after_s=0)})["local"]
    assert lag.lags_at(now.timestamp()) == pytest.approx([100, 200, 300, 400, 500, 600, 700, 800])
    # A pool that demotes has no lag: the estimator would not use it, so nothing is read.
    with django_assert_num_queries(0):
        assert lags_load(now=now, policies={"local": Policy()}) == {}
    # In a FIFO pool the rank time is the submission time (the sample rows were created just now).
    fifo = lags_load(now=now, policies={"local": Policy(ordering=Ordering.FIFO)})["local"]
    assert fifo.lag_at(now.timestamp()) == pytest.approx(-3600, abs=30)

    # A pass replays only the run at the front; the two behind it go where the lag puts them,
    # in a pool whose line moves in deadline order (no demotion: see the test below).
    pool.policy = {"demote_after_s": 0}
    pool.save(update_fields=["policy"])
    front, *back = _three_behind_a_blocker(cast, pool, monkeypatch)
    assert front.queue_position == 1 and front.estimated_start is not None
    for run in back:
        assert run.queue_deadline is not None and run.estimated_start is not None
        assert run.estimated_start_low is not None and run.estimated_start_high is not None
        # Median lag 500 s past the deadline (nearest-rank 20th/80th percentiles: 200 s, 700 s).
        assert (run.estimated_start - run.queue_deadline).total_seconds() == pytest.approx(500, abs=1)
        assert (run.estimated_start_low - run.queue_deadline).total_seconds() == pytest.approx(200, abs=1)
        assert (run.estimated_start_high - run.queue_deadline).total_seconds() == pytest.approx(700, abs=1)


def test_a_demoting_pool_places_runs_far_back_by_the_work_ahead_not_the_lag(cast: Any, pool: NodePool,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Under least attained service runs start far ahead of their deadlines (they stop demoted
    # runs), so the lag of the line would put them late: the fluid guess places them instead.
    now = timezone.now()
    for behind in (800, 100, 700, 200, 600, 300, 500, 400):
        sample = make(cast, pool, status=RunStatus.RUNNING, queue_deadline=now - timedelta(seconds=3600 + behind))
        QueueEstimate.objects.create(run=sample, recorded_at=now - timedelta(seconds=3660), kind=EstimateKind.AT_SUBMISSION,
                                     actual_start=now - timedelta(seconds=3600))
    for run in _three_behind_a_blocker(cast, pool, monkeypatch)[1:]:
        assert run.queue_deadline is not None and run.estimated_start is not None
        # Not the lag's 500 s past its deadline.
        assert abs((run.estimated_start - run.queue_deadline).total_seconds() - 500) > 60


def test_predicted_runtime_uses_history_then_falls_back_to_max(cast: Any, pool: NodePool) -> None:
    run = make(cast, pool, max_runtime_s=900)
    assert run_predicted_runtime(run=run) == 900.0
    now = timezone.now()
    for seconds in (100, 120, 140):
        make(cast, pool, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=seconds + 10),
             finished_at=now - timedelta(seconds=10))
    assert run_predicted_runtime(run=run) == pytest.approx(120.0, abs=1.0)


def test_a_young_runs_rate_waits_until_measured_over_a_tenth_of_its_history(cast: Any, pool: NodePool) -> None:
    # A job's first seconds run slow (imports, data, warm-up): measured then, its rate would make
    # it look five times its length to every estimate behind it.
    from apps.scheduling.snapshot import snapshot_load

    register(pool, "n1")
    now = timezone.now()
    for seconds in (90, 100, 110):
        make(cast, pool, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=seconds + 10),
             finished_at=now - timedelta(seconds=10))
    run = make(cast, pool)
    scheduling_pass()
    start(run)
    began = timezone.now()
    Attempt.objects.filter(run=run).update(started_at=began - timedelta(seconds=15))
    # 60 steps in 3 s: 20 steps/s, so 480 s to go at that pace. History says about 100 s in all.
    Run.objects.filter(pk=run.pk).update(total_steps=10_000, steps_done=400, progress_at=began,
                                         progress_from_at=began - timedelta(seconds=3), progress_from_step=340)

    def predicted_end() -> float:
        [job] = [j for j in snapshot_load(now=began, lock=False).state.running if j.id == str(run.pk)]
        return job.predicted_end - began.timestamp()

    assert predicted_end() == pytest.approx(85.0, abs=2.0), "3 s of reports: the history's 100 s still stands"
    Run.objects.filter(pk=run.pk).update(progress_from_at=began - timedelta(seconds=12), progress_from_step=160)
    assert predicted_end() == pytest.approx(480.0, abs=2.0), "12 s measured (over a tenth of 100 s): the live rate counts"


def test_a_running_runs_rate_is_read_once_with_the_answers_of_three_reads(cast: Any, pool: NodePool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The settled rate used to ask run_live_rate up to three times (over a minute, at all, over
    # the history's tenth); one read with its span must give the same rate in every case.
    from apps.runs.selectors import run_live_measure, run_live_rate
    from apps.scheduling import snapshot

    now = timezone.now()
    for seconds in (90, 100, 110):  # history: about 100 s, so a young run's rate needs 10 s
        make(cast, pool, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=seconds + 10),
             finished_at=now - timedelta(seconds=10))
    run = make(cast, pool, total_steps=10_000)
    predictor = snapshot.predictor_load(now=now)
    started = now - timedelta(seconds=100)

    def three_reads(resumed: int | None) -> float | None:
        def rate(span: float) -> float | None:
            return run_live_rate(run=run, started_at=started, resumed_from_step=resumed, min_span_s=span)

        measured_long = rate(snapshot.RATE_SPAN_MAX_S)
        if measured_long is not None or rate(0.0) is None:
            return measured_long
        query = snapshot.run_query(run, elapsed_s=100.0)
        return rate(snapshot.rate_span_needed(predictor.predict(query)))

    calls: list[int] = []

    def counted(**kwargs: Any) -> tuple[float | None, float]:
        calls.append(1)
        return run_live_measure(**kwargs)

    monkeypatch.setattr(snapshot, "run_live_measure", counted)
    anchors = [None, started - timedelta(seconds=5), *(now - timedelta(seconds=s) for s in (0.5, 1, 5, 10, 12, 59.9, 60, 61, 99))]
    seen: set[str] = set()
    for progress_at in (None, started - timedelta(seconds=1), started, now):
        for anchor in anchors:
            for steps_done, from_step in ((400, 340), (400, 400), (0, 0)):
                for resumed in (None, 100):
                    run.progress_at, run.progress_from_at, run.progress_from_step = progress_at, anchor, from_step
                    run.steps_done = steps_done
                    calls.clear()
                    got = snapshot._settled_rate(predictor, run, started=started, elapsed=100.0, resumed_from_step=resumed)
                    case = f"progress_at={progress_at} anchor={anchor} steps={steps_done}/{from_step} resumed={resumed}"
                    assert got == three_reads(resumed), case
                    assert len(calls) == 1, case
                    seen.add("none" if got is None else "rate")
    assert seen == {"none", "rate"}


def test_predicted_runtime_follows_the_runs_pool(cast: Any, pool: NodePool) -> None:
    # A faster pool joins after plenty of history on the old one: once three runs have finished
    # there, its runs are predicted at its own pace, not at the old pool's.
    fast = NodePool.objects.create(name="h100")
    now = timezone.now()
    for i in range(6):
        make(cast, pool, status=RunStatus.SUCCEEDED, started_at=now - timedelta(hours=2, seconds=500 + i),
             finished_at=now - timedelta(hours=2, seconds=i))
    queued = make(cast, fast, max_runtime_s=900)
    assert run_predicted_runtime(run=queued) == pytest.approx(500.0, abs=5.0)
    for i in range(3):
        make(cast, fast, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=60 + i), finished_at=now - timedelta(seconds=10))
    assert run_predicted_runtime(run=queued) == pytest.approx(50.0, abs=2.0)
    assert run_predicted_runtime(run=make(cast, pool)) == pytest.approx(500.0, abs=5.0)


def test_requests_coalesce(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    asked = time.time()
    scheduling_pass()
    state = SchedulerState.objects.get()
    assert scheduling_pass(requested_at=asked).skipped, "a pass started after the request already saw it"
    assert SchedulerState.objects.get().passes == state.passes
    assert not scheduling_pass(requested_at=time.time()).skipped


def test_queue_api_hides_other_teams_details(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=4)
    hog = make(cast, pool, team="nlp")
    scheduling_pass()
    theirs = make(cast, pool, team="nlp", dpn=1, params={"secret_param": 1})
    mine = make(cast, pool, team="vision", priority="low")
    scheduling_pass()
    data = cast.client(cast.alice).get("/api/v1/queue/").json()
    [local] = [p for p in data["pools"] if p["pool"] == "local"]
    assert [e["position"] for e in local["queue"]] == [1, 2]
    other, own = local["queue"]
    assert other["run"] is None and other["team"] == "nlp" and other["devices"] == 1 and other["predicted_runtime_s"] > 0
    assert other["reason"]["message"] == other["reason"]["label"]
    assert theirs.name not in str(other) and "secret_param" not in str(data) and "tiny-lm" not in str(other)
    assert own["run"]["id"] == mine.pk and own["mine"] and own["reason"]["message"]
    assert own["ahead"] == {"runs": 1, "devices": 1, "by_team": [{"team": "nlp", "runs": 1, "devices": 1}], "held": 0}
    assert f"#{hog.pk}" not in own["reason"]["message"]
    assert local["rules"] and "Urgent jobs go before normal ones" in local["rules"][0]
    assert "summary" in local["accuracy"] and local["utilization"]["total_devices"] == 1
    bob = cast.client(cast.bob).get("/api/v1/queue/?pool=local").json()
    assert [e["run"]["id"] if e["run"] else None for e in bob["pools"][0]["queue"]] == [theirs.pk, None]
    bad = cast.client(cast.alice).get("/api/v1/queue/?pool=nope")
    assert bad.status_code == 400 and "pool" in bad.json()["error"]["fields"]
    assert cast.client(None).get("/api/v1/queue/").status_code in (401, 403)
    schema = cast.client(cast.alice).get("/api/schema/?format=json").json()
    assert "estimated_start" in str(schema["components"]["schemas"].get("QueueEntry", {}))


def test_queue_page_renders(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    make(cast, pool, team="nlp")
    make(cast, pool, team="nlp")
    mine = make(cast, pool, team="vision")
    scheduling_pass()
    web = Client()
    web.force_login(cast.alice)
    page = web.get("/queue/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Pool local" in html and "another team's run" in html and f'data-run="{mine.pk}"' in html
    assert "How this pool decides who goes next" in html and "plotly.min.js" in html and 'id="hist-local"' in html
    # Words, not Django's "0 minutes": the pass just ran and the estimates are minutes away at most.
    assert re.search(r"Last scheduling pass \d+ seconds? ago", html) and not re.search(r"\b0 minutes", html)
    assert re.search(r"\((in \d+ (seconds?|minutes?)|due now)\)", html), html
    partial = web.get("/queue/?partial=1").content.decode()
    assert "<html" not in partial and "Pool local" in partial


def test_queue_says_when_a_pool_has_no_node_online(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    retired = NodePool.objects.create(name="v100-retired")
    Node.objects.create(pool=retired, hostname="old1", agent_uid="old1", state=NodeState.OFFLINE)
    scheduling_pass()
    data = cast.client(cast.alice).get("/api/v1/queue/").json()
    assert {p["pool"]: p["nodes_ready"] for p in data["pools"]} == {"local": 1, "v100-retired": 0}
    web = Client()
    web.force_login(cast.alice)
    html = web.get("/queue/?partial=1").content.decode()
    local, retired_html = html.split('data-pool="v100-retired"', 1)
    assert "No node is taking new runs" not in local and "nobody waiting" in retired_html and "0 waiting runs" not in html
    assert "No node is taking new runs (none online, or all draining): nothing in this pool can start." in retired_html
    assert 'data-nodes-ready="0"' in retired_html


def test_cli_queue_prints_the_queue_apis_pools(cast: Any, pool: NodePool, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI reads what the server answers, here the real API's JSON without a live server.
    register(pool, "n1")
    NodePool.objects.create(name="v100-retired")
    make(cast, pool, team="nlp")
    make(cast, pool, team="nlp", params={"secret_param": 1})
    mine = make(cast, pool, team="vision", priority="low")
    scheduling_pass()
    answer = cast.client(cast.alice).get("/api/v1/queue/").json()
    monkeypatch.setattr(_cli_reports, "_client", lambda args: SimpleNamespace(queue=lambda: answer))
    assert cli.main(["queue"]) == 0
    out = capsys.readouterr().out
    local, retired = out.split("pool v100-retired")
    assert "pool local: 2 waiting" in local and "(another team's run)" in local and f"{mine.pk} vision-low" in local
    assert "secret_param" not in out and "ESTIMATED START" in local
    assert ": 0 waiting (no node taking new runs: nothing here can start)" in retired
    assert cli.main(["queue", "--pool", "v100-retired"]) == 0
    assert "pool local" not in capsys.readouterr().out
    assert cli.main(["queue", "--pool", "nope"]) == 4  # not found, as for a run or project
    assert "no pool 'nope' (pools: local, v100-retired)" in capsys.readouterr().err


@pytest.mark.django_db(transaction=True)
def test_concurrent_passes_never_double_place(cast: Any) -> None:
    pool = NodePool.objects.create(name="local")
    for i in range(4):
        register(pool, f"n{i}", slots=2)
    runs = [make(cast, pool, team="vision" if i % 2 else "nlp") for i in range(20)]
    if connection.vendor == "postgresql" and os.environ.get("DATABASE_URL"):
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                barrier.wait(10)
                for _ in range(3):
                    scheduling_pass()
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
    else:
        # SQLite serializes writers (IMMEDIATE transactions): passes are sequential anyway.
        for _ in range(3):
            scheduling_pass()
    attempts = Counter(Attempt.objects.values_list("run_id", flat=True))
    assert sum(attempts.values()) == 8 and max(attempts.values()) == 1
    held = Counter((node, d) for node, devices in Assignment.objects.filter(state__in=ASSIGNMENT_HOLDS_DEVICES)
                   .values_list("node_id", "devices") for d in devices)
    assert len(held) == 8 and max(held.values()) == 1
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status=RunStatus.SCHEDULED).count() == 8


def test_queue_shows_each_pools_own_day_of_utilization_thinned(cast: Any, pool: NodePool) -> None:
    other = NodePool.objects.create(name="other")
    now = timezone.now()

    def sample(p: NodePool, minutes_ago: int, used: int) -> UtilizationSample:
        return UtilizationSample(pool=p, at=now - timedelta(minutes=minutes_ago), total_devices=8, used_devices=used,
                                 free_devices=8 - used, stranded_devices=0, largest_free_block=8 - used, queued_runs=0,
                                 queued_devices=0)

    # A day and a half once a minute in "local" (the older half day must not show), three in "other".
    UtilizationSample.objects.bulk_create([sample(pool, m, m % 8) for m in range(36 * 60)])
    UtilizationSample.objects.bulk_create([sample(other, m, 5) for m in (1, 2, 3)])
    data = cast.client(cast.alice).get("/api/v1/queue/").json()
    pools = {p["pool"]: p for p in data["pools"]}
    local = pools["local"]["utilization_history"]
    assert 200 < len(local) <= 288, len(local)
    ats = [row["at"] for row in local]
    assert ats == sorted(ats) and ats[0] >= (now - timedelta(hours=24)).isoformat().replace("+00:00", "Z")
    assert pools["local"]["utilization"]["used_devices"] == 0, "the current figure is the newest sample, not a thinned one"
    assert [row["used_devices"] for row in pools["other"]["utilization_history"]] == [5, 5, 5]
    assert pools["other"]["accuracy"]["runs"] == 0 and pools["local"]["accuracy"]["runs"] == 0


@pytest.mark.parametrize("promise", [True, False], ids=["promised", "not-promised"])
def test_a_promised_first_estimate_becomes_the_deadline_and_later_runs_go_behind(
        cast: Any, pool: NodePool, promise: bool) -> None:
    """`Policy.promise_estimates` (issue 28): a long run's first estimated start, well before its
    virtual deadline, becomes its deadline, so a short run submitted later no longer overtakes it."""
    pool.policy = {"promise_estimates": promise}
    pool.save()
    register(pool, "n1")
    blocker = make(cast, pool, max_runtime_s=600)
    assert scheduling_pass().placed == [blocker.pk]
    start(blocker)
    long = make(cast, pool, max_runtime_s=36_000)
    scheduling_pass()
    long.refresh_from_db()
    [row] = QueueEstimate.objects.filter(run=long)
    assert long.queue_deadline is not None and row.raw_estimated_start is not None
    if not promise:  # the estimate is well before the virtual deadline: a promise would move it
        assert row.raw_estimated_start < long.queue_deadline - timedelta(hours=1)
    assert (long.queue_deadline == row.raw_estimated_start) is promise
    promised = long.queue_deadline

    short = make(cast, pool, max_runtime_s=600)
    scheduling_pass()
    refresh(long, short)
    assert long.queue_deadline == promised  # kept: only the first estimate is a promise
    assert (long.queue_position, short.queue_position) == ((1, 2) if promise else (2, 1))
