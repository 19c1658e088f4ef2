from __future__ import annotations

from celery import shared_task

from apps.slurm.services import slurm_sync

SYNC_TASK = "slurm.sync"


@shared_task(name=SYNC_TASK, ignore_result=True)
def sync() -> dict[str, int]:
    """Submit queued runs of Slurm pools, follow their jobs (the beat runs it every TRAINYARD_SLURM_SYNC_S)."""
    return slurm_sync()
