"""A pass reads the attempts of the runs it schedules once (`snapshot.attempt_history`): their
attained service, preemption count, last requeue and last run, and whether they were placed
before, all from the same rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.nodes.models import NodePool
from apps.runs.models import Attempt, AttemptStatus, Run
from apps.scheduling.services import scheduling_pass
from apps.scheduling.snapshot import snapshot_load
from tests.agents.server import register
from tests.scheduling.test_django_scheduling import make, start


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _attempt(run: Run, number: int, *, created: datetime, status: str = AttemptStatus.PREEMPTED,
             started: datetime | None = None, ended: datetime | None = None, stop_kind: str = "") -> None:
    attempt = Attempt.objects.create(run=run, number=number, status=status, started_at=started, ended_at=ended,
                                     stop_kind=stop_kind)
    Attempt.objects.filter(pk=attempt.pk).update(created_at=created)


def _attempt_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if '"runs_attempt"' in q["sql"]]


def test_the_snapshot_reads_the_runs_attempts_once(cast: Any, pool: NodePool) -> None:
    now = timezone.now()
    register(pool, "n1")
    # Running now, preempted once before after an hour's run.
    running = make(cast, pool, max_runtime_s=86400)
    _attempt(running, 1, created=now - timedelta(hours=5), started=now - timedelta(hours=5),
             ended=now - timedelta(hours=4), stop_kind="preempt")
    assert scheduling_pass().placed == [running.pk]
    start(running)
    # Back in line: preempted after two hours, and lost after half an hour (the latest).
    requeued = make(cast, pool)
    _attempt(requeued, 1, created=now - timedelta(hours=4), started=now - timedelta(hours=4),
             ended=now - timedelta(hours=2), stop_kind="preempt")
    _attempt(requeued, 2, created=now - timedelta(hours=1), status=AttemptStatus.LOST,
             started=now - timedelta(minutes=50), ended=now - timedelta(minutes=20))
    # Placed once, its node lost before it started: back in line with nothing attained.
    unstarted = make(cast, pool)
    _attempt(unstarted, 1, created=now - timedelta(minutes=6), status=AttemptStatus.LOST,
             ended=now - timedelta(minutes=5))
    fresh = make(cast, pool)

    with CaptureQueriesContext(connection) as queries:
        snap = snapshot_load(now=timezone.now(), lock=False)
    # The attempts holding devices (by pk), the history of the runs in the snapshot (by run), and
    # the fair-share usage (by time): a second read of the runs' attempts is one too many.
    assert len(_attempt_reads(queries)) == 3, _attempt_reads(queries)

    [job] = snap.state.running
    assert (job.id, job.preemptions) == (str(running.pk), 1)
    assert job.attained_s == pytest.approx(3600)
    queued = {j.id: j for j in snap.state.queued}
    back = queued[str(requeued.pk)]
    assert (back.preemptions, back.placed_before) == (1, True)
    assert back.requeued_at == pytest.approx((now - timedelta(minutes=20)).timestamp())
    assert back.last_run_s == pytest.approx(1800)
    assert back.attained_s == pytest.approx(2 * 3600 + 1800)
    lost = queued[str(unstarted.pk)]
    assert (lost.placed_before, lost.preemptions, lost.requeued_at, lost.attained_s) == (True, 0, None, 0.0)
    new = queued[str(fresh.pk)]
    assert (new.placed_before, new.preemptions, new.requeued_at, new.last_run_s, new.attained_s) == (
        False, 0, None, 0.0, 0.0)
