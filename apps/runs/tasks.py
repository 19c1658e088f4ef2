from __future__ import annotations

from celery import shared_task

from apps.runs.services.placement import placement_pass


@shared_task(name="scheduling.pass", ignore_result=True)
def scheduling_pass() -> None:
    """Place queued runs (first-fit for now; the scheduler replaces placement_pass)."""
    placement_pass()
