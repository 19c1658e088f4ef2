"""Submitting runs: check the submission (submission.py), then queue it in one transaction (or
queue nothing).

Admission checks registered by other apps (billing, quotas) run last, inside the transaction,
with the project row locked so two concurrent submissions to one project see each other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record, snapshot
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.runs.models import Run, RunStatus
from apps.runs.services.placement import request_scheduling_pass
from apps.runs.services.submission import Submission, ValidSubmission, submission_validate
from apps.runs.services.transitions import run_new
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser

# Other apps append checks here in their AppConfig.ready(). Each is called as
# ``check(run=<unsaved Run>, project=<locked Project>, user=<user>)`` inside the submit
# transaction and raises a ServiceError to refuse; for a sweep it is called once per child.
ADMISSION_CHECKS: list[Callable[..., None]] = []

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
            run = _admit_and_save(_build_run(valid, project=locked, user=user, now=timezone.now()), project=locked, user=user)
        request_scheduling_pass()
    return run


def _entrypoint(template: JobTemplate, params: dict[str, Any]) -> str:
    if template.kind == TemplateKind.CUSTOM:
        return str(params.get("command", "")).strip()
    return template.entrypoint


def _total_steps(template: JobTemplate, params: dict[str, Any]) -> int | None:
    value = params.get(template.total_steps_param) if template.total_steps_param else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _build_run(valid: ValidSubmission, *, project: Project, user: AnyUser, now: datetime, template: JobTemplate | None = None,
               params: dict[str, Any] | None = None, **changes: Any) -> Run:
    """An unsaved run of the submission; a sweep's parent and children give their own template,
    params and `changes` (name, parent, status...)."""
    template = template or valid.template
    params = valid.params if params is None else params
    fields: dict[str, Any] = {
        **valid.run_fields(),
        "status": RunStatus.QUEUED,
        "project": project,
        "template": template,
        "params": params,
        "submitted_by": user if isinstance(user, AbstractBaseUser) else None,  # type: ignore[misc]
        "grace_period_s": template.grace_period_s,
        "max_restarts": template.max_restarts,
        "entrypoint": _entrypoint(template, params),
        "checkpoint_policy": dict(template.checkpoint_policy or {}),
        "queued_at": now,
        "total_steps": _total_steps(template, params),
    }
    return run_new(**{**fields, **changes})


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
    parent = _build_run(valid, project=project, user=user, now=now, name=valid.name or f"sweep {valid.tags['family']}",
                        init_checkpoint=None, code_snapshot=None, secrets=[], status=RunStatus.RUNNING)
    parent.started_at, parent.devices_per_node, parent.nodes = now, 0, 1
    parent.total_steps, parent.max_restarts = len(valid.sweep.trials), 0
    parent.save()
    audit_record(action="run.submit", target=parent, team_id=project.team_id, after=snapshot(parent, RUN_AUDIT_FIELDS))
    for index, params in enumerate(valid.sweep.trials, start=1):
        child = _build_run(valid, project=project, user=user, now=now, template=valid.sweep.template, params=params,
                           name=f"{parent.name} #{index}", parent=parent)
        _admit_and_save(child, project=project, user=user)
    return parent
