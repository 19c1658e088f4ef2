"""The live pass sees what the preemption cap and the starvation guard need (issue 28): how often
a run was preempted, and when its last attempt ended and how long it ran."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.billing.models import Quota
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, RunStatus
from apps.scheduling.services import scheduling_pass
from apps.scheduling.snapshot import attempt_history, snapshot_load
from tests.agents.server import register
from tests.runs.factories import make_template
from tests.scheduling.test_django_scheduling import exit_, make, start


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def test_the_snapshot_carries_preemptions_and_the_last_requeue(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    make_template()
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=1)
    run = make(cast, pool, team="nlp", max_runtime_s=86400)
    assert scheduling_pass().placed == [run.pk]
    attempt = start(run)
    # Ran two hours, then the scheduler asked it to stop for another run (as `run_preempt` does).
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(hours=2), stop_kind="preempt",
                                                 stop_requested_at=timezone.now())
    exit_(run, stop_kind="preempt")
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    ended = Attempt.objects.get(pk=attempt.pk).ended_at
    assert ended is not None
    count, requeued_at, last_run_s = attempt_history(running_ids=[], queued_ids=[run.pk], now=timezone.now()).preemptions[run.pk]
    assert count == 1 and requeued_at == pytest.approx(ended.timestamp()) and last_run_s == pytest.approx(7200, abs=5)
    queued = {j.id: j for j in snapshot_load(now=timezone.now(), lock=False).state.queued}[str(run.pk)]
    assert (queued.preemptions, queued.requeued_at) == (1, pytest.approx(ended.timestamp()))
    assert queued.last_run_s == pytest.approx(7200, abs=5)
    # A run that never ran has no history.
    fresh = make(cast, pool, team="vision")
    assert fresh.pk not in attempt_history(running_ids=[], queued_ids=[fresh.pk], now=timezone.now()).preemptions
