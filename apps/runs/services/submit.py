"""Submitting runs: check the submission (submission.py), then queue it in one transaction (or
queue nothing).

Admission checks registered by other apps (billing, quotas) run last, inside the transaction,
with the project row locked so two concurrent submissions to one project see each other.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record, snapshot
from apps.core.queueing import request_scheduling_pass
from apps.runs.models import Run, RunStatus
from apps.runs.services.submission import ADMISSION_CHECKS, Submission, ValidSubmission, run_build, submission_validate
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser

RUN_AUDIT_FIELDS = ["project", "template", "name", "priority", "pool", "nodes", "devices_per_node", "status", "parent", "family"]


def run_submit(*, user: AnyUser, submission: Submission | None = None, **fields: Any) -> Run:
    """Checks a submission and queues it (a sweep queues one child per point under a parent).
    ``fields`` are a Submission's, for a caller without one (``run_submit(project=..., template=...,
    params=..., user=...)``).

    Raises Forbidden for a role below engineer and ServiceError (400) naming every bad field;
    on any error nothing is written.
    """
    valid = submission_validate(submission=submission or Submission(**fields), user=user)
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=valid.project.pk)
        if valid.sweep is not None:
            run = _sweep_create(valid, project=locked, user=user)
        else:
            run = _admit_and_save(run_build(valid, project=locked, user=user, now=timezone.now()), project=locked, user=user)
        request_scheduling_pass()
    return run


def _admit_and_save(run: Run, *, project: Project, user: AnyUser) -> Run:
    for check in ADMISSION_CHECKS:
        check(run=run, project=project, user=user)
    run.save()
    audit_record(action="run.submit", target=run, team_id=project.team_id, after=snapshot(run, RUN_AUDIT_FIELDS))
    return run


def _sweep_create(valid: ValidSubmission, *, project: Project, user: AnyUser) -> Run:
    """A parent run (the family's controller: it holds no devices and is never scheduled) plus
    one queued child per point of the space."""
    assert valid.sweep is not None
    now = timezone.now()
    # The controller needs no devices and must never be placed: it is running from the start
    # and run_family_refresh finishes it when its last child ends.
    parent = run_build(valid, project=project, user=user, now=now, name=valid.name or f"sweep {valid.tags['family']}",
                        init_checkpoint=None, code_snapshot=None, secrets=[], status=RunStatus.RUNNING)
    parent.started_at, parent.devices_per_node, parent.nodes = now, 0, 1
    parent.total_steps, parent.max_restarts = len(valid.sweep.trials), 0
    parent.save()
    audit_record(action="run.submit", target=parent, team_id=project.team_id, after=snapshot(parent, RUN_AUDIT_FIELDS))
    for index, params in enumerate(valid.sweep.trials, start=1):
        child = run_build(valid, project=project, user=user, now=now, template=valid.sweep.template, params=params,
                           name=f"{parent.name} #{index}", parent=parent)
        _admit_and_save(child, project=project, user=user)
    return parent
