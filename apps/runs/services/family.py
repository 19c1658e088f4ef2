"""Sweep families: the parent run is a controller that holds no devices; it is running while
its children run and finishes when the last one ends. Idempotent, so anyone may call
run_family_refresh at any time (the lifecycle code, the run API, the child-finished hook)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_save
from django.utils import timezone

from apps.core.errors import Conflict
from apps.runs.models import FINISHED_STATUSES, Run, RunStatus
from apps.runs.services.lifecycle import run_cancel
from apps.runs.services.transitions import run_transition


@transaction.atomic
def run_family_refresh(*, parent: Run) -> Run:
    """Rolls the children's states up into the parent: progress, then the final status."""
    locked = Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=parent.pk)
    if locked.status in FINISHED_STATUSES:
        return locked
    statuses = list(Run.objects.filter(parent_id=locked.pk).values_list("status", flat=True))
    if not statuses:
        return locked
    done = sum(1 for status in statuses if status in FINISHED_STATUSES)
    if done < len(statuses):
        if locked.steps_done != done:
            locked.steps_done, locked.progress_at = done, timezone.now()
            locked.save(update_fields=["steps_done", "progress_at", "updated_at"])
        return locked
    failed = sum(1 for status in statuses if status == RunStatus.FAILED)
    cancelled = sum(1 for status in statuses if status == RunStatus.CANCELLED)
    if failed:
        status, reason = RunStatus.FAILED, f"{failed} of {len(statuses)} runs failed"
    elif cancelled == len(statuses):
        status, reason = RunStatus.CANCELLED, "every run was cancelled"
    else:
        status, reason = RunStatus.SUCCEEDED, f"{len(statuses) - cancelled} of {len(statuses)} runs succeeded"
    now = timezone.now()
    run_transition(locked, to=status, action=f"run.{status}", reason=reason, steps_done=done, progress_at=now, finished_at=now)
    return locked


def run_family_cancel(*, parent: Run, user: Any) -> Run:
    """Cancels every unfinished child, then the parent itself."""
    if parent.is_finished:
        raise Conflict(f"run {parent.pk} is already {parent.status}", code="run_finished")
    for child in Run.objects.filter(parent_id=parent.pk).exclude(status__in=FINISHED_STATUSES).order_by("pk"):
        try:
            run_cancel(run=child, user=user)
        except Conflict:
            continue  # finished meanwhile: nothing to cancel
    parent.refresh_from_db()
    if parent.is_finished:
        return parent
    return run_cancel(run=parent, user=user)


def _child_saved(sender: type[Run], instance: Run, **kwargs: Any) -> None:
    # Any save() that finishes a child refreshes its family once the transaction commits, so
    # the lifecycle code need not know about sweeps. (Conditional .update()s do not send this;
    # the run API refreshes families it shows as a fallback.)
    if instance.parent_id and instance.status in FINISHED_STATUSES:
        parent_id = instance.parent_id
        transaction.on_commit(lambda: _refresh_by_id(parent_id))


def _refresh_by_id(parent_id: int) -> None:
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is not None:
        run_family_refresh(parent=parent)


def connect_signals() -> None:
    post_save.connect(_child_saved, sender=Run, dispatch_uid="runs.family.child_saved")
