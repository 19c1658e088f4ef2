"""Least attained service through the Django side: the pass demotes a run that has run past the
pool's threshold, a new run preempts it, and back in line it carries the time it ran (over its
ended attempts) and says why it waits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.billing.models import Quota
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.scheduling.services import scheduling_pass
from apps.scheduling.snapshot import attempt_history, snapshot_load
from tests.agents.server import register
from tests.runs.factories import body as forecast_body
from tests.runs.factories import make_template
from tests.scheduling.test_django_scheduling import exit_, make, refresh, start


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def test_a_run_demoted_after_an_hour_is_preempted_by_a_new_run_and_waits_with_its_service(
    cast: Any, pool: NodePool
) -> None:
    register(pool, "n1")
    make_template()
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=1)
    long = make(cast, pool, team="nlp", max_runtime_s=86400)
    assert scheduling_pass().placed == [long.pk]
    attempt = start(long)
    # It has been running for two hours.
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(hours=2))

    # Asked before submitting, the forecast says the run would make room for itself.
    client = cast.client(cast.alice)
    forecast = client.post("/api/v1/queue/forecast/", forecast_body(cast), format="json")
    assert forecast.status_code == 200, forecast.content
    assert forecast.json()["reason"]["code"] == "preempting"
    assert forecast.json()["summary"].startswith("Would start once the runs stopped to make room for it have checkpointed")

    new = make(cast, pool, team="vision")
    result = scheduling_pass()
    assert result.placed == [] and result.preempted == [long.pk]
    refresh(long, new)
    assert long.reason_code == "preempting" and "has run for 2 h in all" in long.status_reason
    assert new.reason_code == "preempting" and "that have run longer than it" in new.status_reason
    event = AuditEvent.objects.get(action="run.preempt", object_id=str(long.pk))
    assert event.after["for_run"] == new.pk and "has run for 2 h in all" in event.after["reason"]

    exit_(long, stop_kind="preempt")
    long.refresh_from_db()
    assert long.status == RunStatus.QUEUED
    service = attempt_history(running_ids=[], queued_ids=[long.pk], now=timezone.now()).attained
    assert service[long.pk] == pytest.approx(7200, abs=5)
    queued = {j.id: j for j in snapshot_load(now=timezone.now(), lock=False).state.queued}
    assert queued[str(long.pk)].attained_s == pytest.approx(7200, abs=5)

    # A run submitted after it goes ahead of it: it has not run yet.
    later = make(cast, pool, team="vision")
    assert scheduling_pass().placed == [new.pk]
    refresh(long, later)
    assert (later.queue_position, long.queue_position) == (1, 2)
    assert long.reason_code == "ran_longer_than_others"
    assert long.status_reason.startswith("It has run for 2 h in all, more than pool local's 1 h")

    # At the front of the line, it says it is next and how long it has run.
    start(new)
    exit_(new)
    scheduling_pass()
    refresh(long, later)
    assert later.status == RunStatus.SCHEDULED and long.queue_position == 1
    assert long.reason_code == "waiting_for_resources"
    assert "It has run for 2 h in all and resumes from its latest checkpoint." in long.status_reason

    # Resumed, the new attempt's time adds to the two hours it already ran.
    start(later)
    exit_(later)
    scheduling_pass()
    long.refresh_from_db()
    assert long.status == RunStatus.SCHEDULED
    resumed = start(long)
    resumed.refresh_from_db()
    assert resumed.number == 2 and resumed.started_at is not None
    snap = snapshot_load(now=timezone.now(), lock=False)
    running = {r.id: r for r in snap.state.running}[str(long.pk)]
    assert running.attained_s == pytest.approx(7200, abs=5)
    assert running.started_at == pytest.approx(resumed.started_at.timestamp())
    assert running.service(snap.state.now) == pytest.approx(7200, abs=10)


def test_a_pool_can_turn_demotion_off(cast: Any, pool: NodePool) -> None:
    pool.policy = {"demote_after_s": 0}
    pool.save()
    register(pool, "n1")
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=1)
    long = make(cast, pool, team="nlp", max_runtime_s=86400)
    scheduling_pass()
    attempt = start(long)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(hours=20))
    new = make(cast, pool, team="vision")
    assert scheduling_pass().preempted == []
    new.refresh_from_db()
    assert new.status == RunStatus.QUEUED and new.reason_code != "preempting"
    assert Run.objects.get(pk=long.pk).status == RunStatus.RUNNING
