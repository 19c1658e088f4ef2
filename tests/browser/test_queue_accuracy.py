"""The queue page's accuracy line (issue 28, acceptance 3): under the overall figure, one line each
for runs that waited over 10 minutes, over an hour, and requeued runs, saying when one has none
yet. Django's live_server; screenshot test-artifacts/queue-accuracy.png."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.nodes.models import NodePool
from apps.runs.models import RunStatus
from tests.fixtures.browser import screenshot
from tests.scheduling.test_accuracy_buckets import MIN, _attempt, _estimate
from tests.scheduling.test_django_scheduling import make

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_queue_page_shows_accuracy_for_runs_that_really_waited(cast: Any, live_server: Any, as_alice: Any) -> None:
    pool = NodePool.objects.create(name="local")
    now = timezone.now()
    actual = now - timedelta(minutes=1)
    for waited, error in ((5, 0), (3 * MIN, MIN), (15 * MIN, 2 * MIN), (25 * MIN, 14 * MIN), (40 * MIN, 4 * MIN)):
        _estimate(make(cast, pool, status=RunStatus.RUNNING), waited_s=waited, error_s=error, actual=actual)
    requeued = make(cast, pool, status=RunStatus.RUNNING)
    _attempt(requeued, at=now - timedelta(hours=2))
    _estimate(requeued, waited_s=20 * MIN, error_s=6 * MIN, actual=actual)

    page = as_alice
    page.goto(f"{live_server.url}/queue/")
    lines = page.locator("section[data-pool='local'] [data-accuracy]")
    text = lines.inner_text()
    assert "75% of the 4 runs that waited" in text, text
    assert "Waited over 10 minutes: 2 of 3 started within 10 minutes" in text, text
    assert "Waited over 1 hour: none in the last 7 days yet." in text, text
    assert "Requeued (preempted, or its node failed): 1 of 1 restarted within" in text, text
    assert lines.locator("li[data-bucket]").count() == 3
    screenshot(page, "queue-accuracy")
