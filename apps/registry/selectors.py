"""Reads of the registry: scoped model lists, evidence for a version, and cost per version."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet, Sum

from apps.billing import costmodel
from apps.billing.selectors import ledger_filter
from apps.jobtemplates.models import TemplateKind
from apps.registry.models import ModelVersion, RegisteredModel, Stage
from apps.runs.models import Run, RunStatus
from apps.tenants.selectors import AnyUser, has_role, team_ids_for_user, user_is_finance
from apps.tracking.selectors import metric_summaries

# An artifact has no init_checkpoint to start an evaluation from: the evaluate run names the
# artifact it evaluated in this tag (its id).
ARTIFACT_TAG = "model_artifact"
OPS = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
       "==": lambda a, b: a == b}


def model_list(*, user: AnyUser) -> QuerySet[RegisteredModel]:
    return RegisteredModel.objects.filter(project__team_id__in=team_ids_for_user(user=user)).select_related("project__team")


def model_can_edit(*, user: AnyUser, model: RegisteredModel) -> bool:
    return has_role(user=user, team_id=model.project.team_id, at_least="engineer")


def model_production(*, model: RegisteredModel) -> ModelVersion | None:
    return model.versions.filter(stage=Stage.PRODUCTION).first()


@dataclass(frozen=True)
class Check:
    """One threshold against one run's final figure (None: the run never reported the metric)."""

    metric: str
    op: str
    value: float
    actual: float | None

    @property
    def met(self) -> bool:
        return self.actual is not None and not math.isnan(self.actual) and bool(OPS[self.op](self.actual, self.value))

    def words(self) -> str:
        got = "not reported" if self.actual is None else f"{self.actual:g}"
        return f"{self.metric} {self.op} {self.value:g} (got {got})"

    def as_dict(self) -> dict[str, Any]:
        actual = None if self.actual is None or not math.isfinite(self.actual) else self.actual
        return {"metric": self.metric, "op": self.op, "value": self.value, "actual": actual, "met": self.met}


def evidence_checks(*, model: RegisteredModel, run: Run) -> list[Check]:
    """Each threshold of the model against the run's last value of its metric."""
    keys = [t["metric"] for t in model.thresholds]
    summaries = metric_summaries(run_ids=[run.pk], keys=keys).get(run.pk, {}) if keys else {}
    checks = []
    for t in model.thresholds:
        s = summaries.get(t["metric"])
        actual = None
        if s is not None:
            actual = float(s.last_value) if not s.last_flag and s.last_value is not None else math.nan
        checks.append(Check(metric=t["metric"], op=t["op"], value=float(t["value"]), actual=actual))
    return checks


def evidence_problem(*, version: ModelVersion, run: Run) -> str:
    """Why this run cannot count as an evaluation of this version ('' when it can)."""
    if run.project_id != version.model.project_id:
        return f"run {run.pk} is not a run of this project"
    if run.template.kind != TemplateKind.EVALUATE:
        return f"run {run.pk} is a {run.template.kind} run; evidence must be an evaluate run"
    if not _evaluated(version, run):
        return f"run {run.pk} did not evaluate this version ({evaluates_how(version=version)})"
    if run.status != RunStatus.SUCCEEDED:
        return f"run {run.pk} is {run.status}; evidence must be a succeeded run"
    return ""


def evaluates_how(*, version: ModelVersion) -> str:
    """What makes a run an evaluation of this version, in words for a refusal."""
    if version.artifact_id is not None:
        return f'an evaluate run tagged "{ARTIFACT_TAG}": "{version.artifact_id}" evaluates this artifact version'
    return f"an evaluate run with init_checkpoint {version.checkpoint_id} evaluates this version"


def _evaluated(version: ModelVersion, run: Run) -> bool:
    if version.artifact_id is not None:
        return str((run.tags or {}).get(ARTIFACT_TAG, "")) == str(version.artifact_id)
    return version.checkpoint_id is not None and run.init_checkpoint_id == version.checkpoint_id


def evaluate_runs(*, version: ModelVersion) -> QuerySet[Run]:
    """Succeeded evaluate runs of this version, latest first."""
    runs = Run.objects.filter(project_id=version.model.project_id, template__kind=TemplateKind.EVALUATE, status=RunStatus.SUCCEEDED)
    if version.artifact_id is not None:
        runs = runs.filter(**{f"tags__{ARTIFACT_TAG}": str(version.artifact_id)})
    elif version.checkpoint_id is not None:
        runs = runs.filter(init_checkpoint_id=version.checkpoint_id)
    else:
        return Run.objects.none()
    return runs.select_related("template").order_by("-finished_at", "-pk")


def version_cost(*, version: ModelVersion) -> Decimal:
    """Its training family's spend: every ledger entry of the source run's family in the project
    (the source run alone when it has no family)."""
    entries, _ = ledger_filter(params={"project": str(version.model.project_id)})
    run = version.source_run
    entries = entries.filter(run__family=run.family) if run.family else entries.filter(run_id=run.pk)
    total = entries.order_by().aggregate(total=Sum("cost"))["total"]
    return costmodel.to_cents(Decimal(total or 0))


def version_costs(*, user: AnyUser) -> list[dict[str, Any]]:
    """Cost per model version: every team's for finance, the user's teams' for anyone else."""
    versions = (ModelVersion.objects.select_related("model__project__team", "source_run")
                .order_by("model__project_id", "model__name", "number"))
    if not user_is_finance(user=user):
        versions = versions.filter(model__project__team_id__in=team_ids_for_user(user=user))
    return [{"team": v.model.project.team.slug, "project": v.model.project.full_slug, "model": v.model.name, "model_id": v.model_id,
             "version": v.number, "stage": v.stage, "family": v.source_run.family, "source_run": v.source_run_id,
             "cost": str(version_cost(version=v))} for v in versions]
