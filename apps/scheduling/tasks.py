from __future__ import annotations

from celery import shared_task

from apps.core.queueing import SCHEDULING_PASS_TASK
from apps.scheduling.services import placement_pass


@shared_task(name=SCHEDULING_PASS_TASK, ignore_result=True)
def scheduling_pass(requested_at: float | None = None) -> None:
    """One scheduling pass; a request made before the latest pass started is already served."""
    placement_pass(requested_at=requested_at)
