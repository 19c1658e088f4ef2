"""Writes to the registry: models, versions, stage changes, promotion on evidence, rollback.

Every stage change is audited (audit_record); `model.promoted` and `model.rolled_back` records
become webhook events (apps.webhooks.signals), in the same transaction as the change.
"""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from apps.artifacts.models import Artifact
from apps.audit.services import audit_record
from apps.core.errors import Conflict, FieldError, Forbidden, ServiceError
from apps.registry import selectors
from apps.registry.models import ModelVersion, RegisteredModel, Stage
from apps.runs.models import Checkpoint, Run
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role
from apps.tracking.selectors import run_lineage

NAME_MAX = 100
DESCRIPTION_MAX = 2000
MAX_THRESHOLDS = 20
METRIC_MAX = 250
# Stages a version may be moved to by hand; production only through version_promote.
MANUAL_STAGES = (Stage.CANDIDATE, Stage.STAGING, Stage.ARCHIVED)


def _who(user: AnyUser) -> User | None:
    return user if isinstance(user, User) and user.is_authenticated else None


def registry_edit_check(*, user: AnyUser, project: Project) -> None:
    """Engineers and admins of the project's team register and promote; viewers read."""
    if not has_role(user=user, team_id=project.team_id, at_least="engineer"):
        raise Forbidden("Only engineers and admins of the team may change its model registry.")


def thresholds_check(*, thresholds: Any) -> list[dict[str, Any]]:
    if thresholds is None:
        return []
    if not isinstance(thresholds, list):
        raise FieldError("thresholds", 'must be a list like [{"metric": "val_accuracy", "op": ">=", "value": 0.9}]')
    if len(thresholds) > MAX_THRESHOLDS:
        raise FieldError("thresholds", f"at most {MAX_THRESHOLDS} thresholds (got {len(thresholds)})")
    out = []
    for i, t in enumerate(thresholds):
        where = f"thresholds[{i}]"
        if not isinstance(t, dict) or set(t) - {"metric", "op", "value"}:
            raise FieldError(where, 'must be an object with "metric", "op" and "value" only')
        metric = t.get("metric")
        if not isinstance(metric, str) or not metric.strip() or len(metric) > METRIC_MAX:
            raise FieldError(f"{where}.metric", f"must be a non-empty metric key of at most {METRIC_MAX} characters")
        op = t.get("op")
        if op not in selectors.OPS:
            raise FieldError(f"{where}.op", f"must be one of {', '.join(selectors.OPS)} (got {str(op)[:20]!r})")
        value = t.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise FieldError(f"{where}.value", f"must be a finite number (got {str(value)[:40]!r})")
        out.append({"metric": metric.strip(), "op": op, "value": value})
    return out


def _name_check(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise FieldError("name", "required")
    name = name.strip()
    if len(name) > NAME_MAX:
        raise FieldError("name", f"at most {NAME_MAX} characters (got {len(name)})")
    return name


def _description_check(description: Any) -> str:
    if description is None:
        return ""
    if not isinstance(description, str) or len(description) > DESCRIPTION_MAX:
        raise FieldError("description", f"text of at most {DESCRIPTION_MAX} characters")
    return description


def model_create(*, project: Project, name: Any, user: AnyUser, description: Any = "", thresholds: Any = None) -> RegisteredModel:
    registry_edit_check(user=user, project=project)
    name = _name_check(name)
    fields = {"description": _description_check(description), "thresholds": thresholds_check(thresholds=thresholds)}
    if RegisteredModel.objects.filter(project=project, name=name).exists():
        raise FieldError("name", f"a model named {name!r} already exists in {project.full_slug}")
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(project=project, name=name, created_by=_who(user), **fields)
            audit_record(action="model.create", target=model, team_id=project.team_id, actor=user,
                         after={"project": project.full_slug, "name": name, **fields})
    except IntegrityError as exc:  # a concurrent create of the same name
        raise FieldError("name", f"a model named {name!r} already exists in {project.full_slug}") from exc
    return model


def model_update(*, model: RegisteredModel, user: AnyUser, **changes: Any) -> RegisteredModel:
    registry_edit_check(user=user, project=model.project)
    clean: dict[str, Any] = {}
    if "description" in changes:
        clean["description"] = _description_check(changes["description"])
    if "thresholds" in changes:
        clean["thresholds"] = thresholds_check(thresholds=changes["thresholds"])
    if not clean:
        return model
    with transaction.atomic():
        before = {k: getattr(model, k) for k in clean}
        for k, v in clean.items():
            setattr(model, k, v)
        model.save(update_fields=[*clean, "updated_at"])
        audit_record(action="model.update", target=model, team_id=model.project.team_id, actor=user, before=before, after=clean)
    return model


def _checkpoint_for(*, project: Project, checkpoint: Any, run: Any) -> Checkpoint:
    """The checkpoint named, or the run's latest; one of another project reads as absent."""
    live = Checkpoint.objects.filter(run__project=project, deleted_at__isnull=True).select_related("run__template")
    if checkpoint not in (None, ""):
        found = live.filter(pk=checkpoint).first() if str(checkpoint).isdigit() else None
        if found is None:
            raise FieldError("checkpoint", f"no checkpoint {str(checkpoint)[:40]!r} of a run in {project.full_slug}")
        if run not in (None, "") and str(found.run_id) != str(run):
            raise FieldError("checkpoint", f"checkpoint {found.pk} belongs to run {found.run_id}, not run {run}")
        return found
    if run in (None, ""):
        raise FieldError("checkpoint", "give a checkpoint id (or a run, for its latest checkpoint)")
    if not str(run).isdigit() or not Run.objects.filter(pk=run, project=project).exists():
        raise FieldError("run", f"no run {str(run)[:40]!r} in {project.full_slug}")
    latest = live.filter(run_id=run).order_by("-step", "-pk").first()
    if latest is None:
        raise FieldError("run", f"run {run} has no checkpoint to register")
    return latest


def _artifact_for(*, project: Project, artifact: Any, run: Any) -> Artifact:
    found = (Artifact.objects.filter(pk=artifact, run__project=project).select_related("run__template").first()
             if str(artifact).isdigit() else None)
    if found is None:
        raise FieldError("artifact", f"no artifact {str(artifact)[:40]!r} of a run in {project.full_slug}")
    if run not in (None, "") and str(found.run_id) != str(run):
        raise FieldError("artifact", f"artifact {found.pk} belongs to run {found.run_id}, not run {run}")
    return found


def version_create(*, model: RegisteredModel, user: AnyUser, checkpoint: Any = None, run: Any = None, artifact: Any = None,
                   description: Any = "") -> ModelVersion:
    """A new candidate version from a checkpoint (or an artifact) of a run of the model's project,
    carrying the run's lineage as it is now."""
    registry_edit_check(user=user, project=model.project)
    ckpt: Checkpoint | None = None
    art: Artifact | None = None
    if artifact not in (None, ""):
        if checkpoint not in (None, ""):
            raise FieldError("artifact", "give a checkpoint or an artifact, not both")
        art = _artifact_for(project=model.project, artifact=artifact, run=run)
        source = art.run
        made_of = {"artifact": {"id": art.pk, "name": art.name, "size": art.size, "sha256": art.sha256}}
    else:
        ckpt = _checkpoint_for(project=model.project, checkpoint=checkpoint, run=run)
        source = ckpt.run
        made_of = {"checkpoint": {"id": ckpt.pk, "step": ckpt.step, "sha256": ckpt.sha256, "file_name": ckpt.file_name}}
    description = _description_check(description)
    lineage = {**run_lineage(run=source), "run": {"id": source.pk, "name": source.name, "family": source.family,
                                                   "params": source.params, "tags": source.tags, "status": source.status},
               **made_of}
    with transaction.atomic():
        RegisteredModel.objects.select_for_update().filter(pk=model.pk).first()  # numbers are handed out one at a time
        number = (model.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = ModelVersion.objects.create(model=model, number=number, source_run=source, checkpoint=ckpt, artifact=art,
                                              lineage=lineage, description=description, created_by=_who(user),
                                              stage_changed_at=timezone.now())
        audit_record(action="model.version_create", target=version, team_id=model.project.team_id, actor=user,
                     after={"model": model.name, "version": number, "source_run": source.pk,
                            "checkpoint": ckpt.pk if ckpt else None, "artifact": art.pk if art else None})
    return version


def _locked(version: ModelVersion) -> tuple[RegisteredModel, ModelVersion]:
    """The model row locked (one stage change of a model at a time), and the version re-read under it."""
    model = RegisteredModel.objects.select_for_update().select_related("project").get(pk=version.model_id)
    return model, ModelVersion.objects.select_related("model__project").get(pk=version.pk)


def _move(version: ModelVersion, stage: str, now: Any) -> None:
    version.stage = stage
    version.stage_changed_at = now
    version.save(update_fields=["stage", "stage_changed_at", "evidence_run", "evidence", "replaced"])


def _stage_audit(version: ModelVersion, *, before: str, user: AnyUser, why: str = "") -> None:
    audit_record(action="model.stage_change", target=version, team_id=version.model.project.team_id, actor=user,
                 before={"stage": before}, after={"stage": version.stage, "model": version.model.name, "version": version.number,
                                                  **({"reason": why} if why else {})})


def version_set_stage(*, version: ModelVersion, stage: Any, user: AnyUser) -> ModelVersion:
    registry_edit_check(user=user, project=version.model.project)
    if stage == Stage.PRODUCTION:
        raise FieldError("stage", "production needs evidence: use promote (POST .../promote/ with an evaluate run)")
    if stage not in MANUAL_STAGES:
        raise FieldError("stage", f"one of {', '.join(MANUAL_STAGES)} (got {str(stage)[:20]!r})")
    with transaction.atomic():
        _, version = _locked(version)
        if version.stage == Stage.PRODUCTION:
            raise Conflict(f"v{version.number} is in production: promote another version or roll back instead")
        before = version.stage
        if before == stage:
            return version
        _move(version, stage, timezone.now())
        _stage_audit(version, before=before, user=user)
    return version


def _evidence(version: ModelVersion, evidence_run: Any) -> tuple[Run, list[selectors.Check]]:
    """The evaluate run that lets the version into production and its checks, or a refusal that
    names each unmet threshold with the run's figure."""
    model = version.model
    if evidence_run not in (None, ""):
        run = Run.objects.select_related("template").filter(pk=evidence_run, project=model.project).first() \
            if str(evidence_run).isdigit() else None
        if run is None:
            raise FieldError("evidence_run", f"no run {str(evidence_run)[:40]!r} in {model.project.full_slug}")
        problem = selectors.evidence_problem(version=version, run=run)
        if problem:
            raise FieldError("evidence_run", problem)
        candidates = [run]
    else:
        candidates = list(selectors.evaluate_runs(version=version)[:20])
        if not candidates:
            raise Conflict(f"v{version.number} has no evidence: no succeeded evaluate run of it "
                           f"({selectors.evaluates_how(version=version)})", code="no_evidence")
    for run in candidates:
        checks = selectors.evidence_checks(model=model, run=run)
        if all(c.met for c in checks):
            return run, checks
    run = candidates[0]
    unmet = [c.words() for c in selectors.evidence_checks(model=model, run=run) if not c.met]
    raise ServiceError(f"v{version.number} does not meet the model's thresholds on evaluate run {run.pk}: {'; '.join(unmet)}",
                       fields={"thresholds": unmet}, code="thresholds_unmet")


def version_promote(*, version: ModelVersion, user: AnyUser, evidence_run: Any = None) -> ModelVersion:
    """To production on evidence; the version in production until now goes to archived, and is
    what a rollback restores."""
    registry_edit_check(user=user, project=version.model.project)
    with transaction.atomic():
        model, version = _locked(version)
        if version.stage == Stage.PRODUCTION:
            raise Conflict(f"v{version.number} is already in production")
        run, checks = _evidence(version, evidence_run)
        now = timezone.now()
        current = selectors.model_production(model=model)
        if current is not None:
            _move(current, Stage.ARCHIVED, now)
            _stage_audit(current, before=Stage.PRODUCTION, user=user, why=f"replaced by v{version.number}")
        before = version.stage
        version.evidence_run = run
        version.evidence = {"run": run.pk, "checks": [c.as_dict() for c in checks], "at": now.isoformat()}
        version.replaced = current
        _move(version, Stage.PRODUCTION, now)
        audit_record(action="model.promoted", target=version, team_id=model.project.team_id, actor=user,
                     before={"stage": before, "production": current.number if current else None},
                     after={"stage": Stage.PRODUCTION, "model": model.name, "version": version.number, "evidence_run": run.pk,
                            "figures": version.evidence["checks"], "replaced": current.number if current else None})
    return version


def model_rollback(*, model: RegisteredModel, user: AnyUser) -> ModelVersion:
    """Production goes back to the version the current one replaced; the current one is archived."""
    registry_edit_check(user=user, project=model.project)
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().select_related("project").get(pk=model.pk)
        current = selectors.model_production(model=model)
        if current is None:
            raise Conflict(f"{model.name} has no version in production to roll back")
        previous = current.replaced
        if previous is None:
            raise Conflict(f"v{current.number} replaced no earlier production version: nothing to roll back to")
        now = timezone.now()
        _move(current, Stage.ARCHIVED, now)
        _stage_audit(current, before=Stage.PRODUCTION, user=user, why=f"rolled back to v{previous.number}")
        before = previous.stage
        _move(previous, Stage.PRODUCTION, now)
        audit_record(action="model.rolled_back", target=previous, team_id=model.project.team_id, actor=user,
                     before={"stage": before, "production": current.number},
                     after={"stage": Stage.PRODUCTION, "model": model.name, "version": previous.number, "from_version": current.number,
                            "evidence_run": previous.evidence_run_id})
    return previous
