from __future__ import annotations

from datetime import timedelta

from celery import shared_task

from apps.runs.services.checkpoints import VERIFY_TASK, checkpoint_verify, checkpoints_verify_pending
from apps.runs.services.storage_orphans import storage_orphans_sweep


@shared_task(name=VERIFY_TASK, ignore_result=True)
def checkpoint_verify_queued(checkpoint_id: int) -> None:
    """Read a directly uploaded checkpoint back and record it as stored if it is what was reported."""
    checkpoint_verify(checkpoint_id=checkpoint_id)


@shared_task(name="runs.checkpoint_verify_sweep", ignore_result=True)
def checkpoint_verify_sweep() -> None:
    """Checks whose queued message was lost (the broker was down when the upload completed)."""
    checkpoints_verify_pending(older_than=timedelta(minutes=1))


@shared_task(name="runs.storage_orphans_sweep", ignore_result=True)
def storage_orphans_sweep_task() -> None:
    """Hourly: delete checkpoint and artifact objects no row references, once past the grace period."""
    storage_orphans_sweep(delete=True)
