"""Rerun, clone and annotate a run. A rerun is a new submission of the run's own (template version,
params, tags, resources, priority) through run_submit, so it is checked and admitted (budget,
quota) exactly as any submission; it is linked to its source by the tag ``rerun_of=<id>`` (a clone
from the form by ``cloned_from=<id>``), not by ``parent``, which is a sweep's controller."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import ServiceError
from apps.jobtemplates.models import TemplateKind
from apps.runs.models import Run
from apps.runs.services.submission import GIB, NOTES_MAX, Errors, Submission, submitter_check, tags_resolve
from apps.runs.services.submit import run_submit
from apps.tenants.selectors import AnyUser

RERUN_TAG = "rerun_of"
CLONE_TAG = "cloned_from"
LINK_TAGS = (RERUN_TAG, CLONE_TAG)


def run_resources(*, run: Run) -> dict[str, Any]:
    """The resources the run asked for, as a submission takes them. A sweep's controller holds no
    devices: its trials' resources are those of its first trial."""
    source = run
    if run.template.kind == TemplateKind.SWEEP:
        source = run.children.order_by("pk").first() or run
    resources: dict[str, Any] = {"pool": source.pool.name, "nodes": source.nodes, "devices_per_node": source.devices_per_node,
                                 "max_runtime_s": source.max_runtime_s, "preemptible": source.preemptible}
    if source.memory_bytes_per_device:
        resources["memory_gib_per_device"] = source.memory_bytes_per_device / GIB
    if source.cpus_per_device:
        resources["cpus_per_device"] = source.cpus_per_device
    if len(source.pools or []) > 1:
        resources["pools"] = list(source.pools)
    return resources


def run_submission(*, run: Run, link_tag: str = RERUN_TAG) -> Submission:
    """The submission that queues the run again: its template version, params, tags (``owner``
    is the submitter's, and ``link_tag`` names the source), resources and priority."""
    tags = {key: value for key, value in (run.tags or {}).items() if key not in ("owner", *LINK_TAGS)}
    tags[link_tag] = str(run.pk)
    return Submission(project=run.project, template=run.template, name=run.name, notes=run.notes, params=dict(run.params or {}),
                      tags=tags, priority=run.priority, resources=run_resources(run=run),
                      init_checkpoint=run.init_checkpoint_id, code_snapshot=run.code_snapshot, secrets=list(run.secrets or []))


def run_rerun(*, run: Run, user: AnyUser) -> Run:
    """Queues ``run`` again (see the module docstring); refused as its submission would be (400
    naming each bad field, 403 below engineer, a budget or quota refusal). Audited as
    ``run.rerun`` on the new run, besides its ``run.submit``."""
    with transaction.atomic():
        new = run_submit(submission=run_submission(run=run), user=user)
        audit_record(action="run.rerun", target=new, team_id=run.project.team_id, before={"run": run.pk},
                     after={"run": new.pk, "rerun_of": run.pk})
    return new


def run_clone_record(*, source: Run, run: Run) -> None:
    """Audits a run submitted from the form prefilled with ``source`` (clone and edit)."""
    audit_record(action="run.clone", target=run, team_id=run.project.team_id, before={"run": source.pk},
                 after={"run": run.pk, "cloned_from": source.pk})


def run_annotate(*, run: Run, user: AnyUser, notes: Any = None, tags: Any = None) -> Run:
    """Changes the run's notes and tags (None: unchanged), checked as a submission's (notes at most
    NOTES_MAX characters; tags as submitted, the required ones included; ``owner`` stays the
    run's). Engineers of the project's team only (403). Audited as ``run.annotate``, old → new."""
    submitter_check(user=user, project=run.project)
    errors = Errors()
    changes: dict[str, Any] = {}
    if notes is not None:
        if not isinstance(notes, str):
            errors.add("notes", "must be a string")
        elif len(notes) > NOTES_MAX:
            errors.add("notes", f"must be at most {NOTES_MAX} characters (got {len(notes)})")
        else:
            changes["notes"] = notes
    if tags is not None:
        clean = tags_resolve(tags=tags, user=user, errors=errors)
        owner = (run.tags or {}).get("owner")
        if owner:
            clean["owner"] = owner
        else:
            clean.pop("owner", None)
        changes["tags"] = clean
        changes["family"] = clean.get("family", "")
    if errors.fields:
        summary = "; ".join(f"{name}: {msgs[0]}" for name, msgs in errors.fields.items())
        raise ServiceError(f"Invalid change: {summary}", fields=errors.fields)
    before = {key: getattr(run, key) for key in changes if key != "family"}
    after = {key: value for key, value in changes.items() if key != "family"}
    if before == after:
        return run
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(**changes, updated_at=timezone.now())
        audit_record(action="run.annotate", target=run, team_id=run.project.team_id, before=before, after=after)
    run.refresh_from_db()
    return run
