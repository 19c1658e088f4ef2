from __future__ import annotations

from celery import shared_task

from apps.fleet.services import nodes_sweep


# The name predates this app (the beat schedule and queued messages carry it): kept.
@shared_task(name="nodes.sweep_lost", ignore_result=True)
def sweep_lost() -> dict[str, int]:
    """Silent nodes become lost (their runs requeue); half-started gangs abort; drain deadlines preempt."""
    return nodes_sweep()
