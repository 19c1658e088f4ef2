"""Registry pages: a project's models (/projects/<id>/models/), a model with its versions
(/models/<id>/), the forms behind their buttons, and the cards on the project and run pages."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from apps.artifacts.selectors import artifact_list
from apps.core.errors import FieldError, ServiceError
from apps.registry import selectors, services
from apps.registry.models import ModelVersion, RegisteredModel, Stage
from apps.runs.models import Checkpoint, Run
from apps.tenants.models import Project
from apps.tenants.selectors import has_role, project_list

STAGE_BADGE = {Stage.CANDIDATE: "queued", Stage.STAGING: "running", Stage.PRODUCTION: "succeeded", Stage.ARCHIVED: "cancelled"}


def _model(request: HttpRequest, pk: int) -> RegisteredModel:
    return get_object_or_404(selectors.model_list(user=request.user), pk=pk)


def _version(request: HttpRequest, pk: int, number: int) -> ModelVersion:
    model = _model(request, pk)
    return get_object_or_404(model.versions.select_related("model__project", "checkpoint"), number=number)


@login_required
def models_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(project_list(user=request.user), pk=project_id)
    models = selectors.model_list(user=request.user).filter(project=project).prefetch_related("versions")
    rows = [{"model": m, "versions": len(m.versions.all()),
             "production": next((v.number for v in m.versions.all() if v.stage == Stage.PRODUCTION), None)} for m in models]
    return render(request, "registry/models.html", {
        "project": project, "rows": rows, "can_edit": has_role(user=request.user, team_id=project.team_id, at_least="engineer"),
        "ops": list(selectors.OPS)})


@login_required
@require_POST
def model_create_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(project_list(user=request.user), pk=project_id)
    try:
        thresholds = _thresholds_from_form(request)
        model = services.model_create(project=project, name=request.POST.get("name", ""), user=request.user,
                                      description=request.POST.get("description", ""), thresholds=thresholds)
    except ServiceError as err:
        messages.error(request, err.message)
        return HttpResponseRedirect(f"/projects/{project.pk}/models/")
    messages.success(request, f"Model {model.name} registered.")
    return HttpResponseRedirect(f"/models/{model.pk}/")


def _thresholds_from_form(request: HttpRequest) -> list[Any]:
    """Threshold rows of the form (metric, op, value per row); an unparsable value goes to the service as text."""
    out: list[Any] = []
    for metric, op, value in zip(request.POST.getlist("metric"), request.POST.getlist("op"), request.POST.getlist("value"), strict=False):
        if not metric.strip() and not value.strip():
            continue
        try:
            number: Any = json.loads(value)
        except ValueError:
            number = value
        out.append({"metric": metric, "op": op, "value": number})
    return out


@login_required
def model_page(request: HttpRequest, model_id: int) -> HttpResponse:
    model = _model(request, model_id)
    versions = list(model.versions.select_related("source_run__template", "checkpoint", "artifact", "evidence_run", "replaced",
                                                  "created_by"))
    rows = []
    for v in versions:
        candidates = list(selectors.evaluate_runs(version=v)[:5]) if v.stage != Stage.PRODUCTION else []
        rows.append({"v": v, "badge": STAGE_BADGE[Stage(v.stage)], "cost": selectors.version_cost(version=v),
                     "evaluations": [{"run": r, "checks": selectors.evidence_checks(model=model, run=r)} for r in candidates]})
    production = next((v for v in versions if v.stage == Stage.PRODUCTION), None)
    return render(request, "registry/model.html", {
        "model": model, "project": model.project, "rows": rows, "production": production,
        "can_rollback": production is not None and production.replaced_id is not None,
        "can_edit": selectors.model_can_edit(user=request.user, model=model), "stages": services.MANUAL_STAGES})


def _act(request: HttpRequest, model_id: int, done: str, act: Any) -> HttpResponse:
    try:
        act()
    except ServiceError as err:
        messages.error(request, err.message)
    else:
        messages.success(request, done)
    return HttpResponseRedirect(f"/models/{model_id}/")


@login_required
@require_POST
def version_promote_page(request: HttpRequest, model_id: int, number: int) -> HttpResponse:
    version = _version(request, model_id, number)
    return _act(request, model_id, f"v{number} is in production.", lambda: services.version_promote(
        version=version, user=request.user, evidence_run=request.POST.get("evidence_run") or None))


@login_required
@require_POST
def version_stage_page(request: HttpRequest, model_id: int, number: int) -> HttpResponse:
    version = _version(request, model_id, number)
    stage = request.POST.get("stage", "")
    return _act(request, model_id, f"v{number} moved to {stage}.",
                lambda: services.version_set_stage(version=version, stage=stage, user=request.user))


@login_required
@require_POST
def model_rollback_page(request: HttpRequest, model_id: int) -> HttpResponse:
    model = _model(request, model_id)
    return _act(request, model_id, "Rolled back.", lambda: services.model_rollback(model=model, user=request.user))


@login_required
@require_POST
def version_register_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page card's form: a checkpoint of this run as a new version of a model of its project."""
    run = get_object_or_404(Run.objects.filter(project__in=project_list(user=request.user)), pk=run_id)
    model = selectors.model_list(user=request.user).filter(project_id=run.project_id, pk=request.POST.get("model") or 0).first()
    try:
        if model is None:
            raise FieldError("model", "choose a model of this run's project")
        kind, _, ref = request.POST.get("source", "").partition(":")
        source = {"artifact": ref} if kind == "artifact" else {"checkpoint": ref or request.POST.get("checkpoint") or None}
        version = services.version_create(model=model, user=request.user, run=run.pk, **source)
    except ServiceError as err:
        messages.error(request, err.message)
        return HttpResponseRedirect(f"/runs/{run.pk}/")
    messages.success(request, f"Registered as {model.name} v{version.number}.")
    return HttpResponseRedirect(f"/models/{model.pk}/")


def project_models_panel(request: HttpRequest, project: Project) -> dict[str, Any] | None:
    """The registry card on the project page (registered in PROJECT_PANELS)."""
    models = list(selectors.model_list(user=request.user).filter(project=project).prefetch_related("versions")[:10])
    rows = [{"model": m, "production": next((v.number for v in m.versions.all() if v.stage == Stage.PRODUCTION), None)} for m in models]
    return {"template": "registry/_project_panel.html", "data": {"project": project, "rows": rows}}


def finance_model_costs_panel(request: HttpRequest) -> dict[str, Any] | None:
    """"Model versions" on the finance console (registered in billing's FINANCE_PANELS): each
    version's training family's spend, every team's; the model links where its page is open to the viewer."""
    rows = selectors.version_costs(user=request.user)
    visible = set(selectors.model_list(user=request.user).values_list("pk", flat=True))
    for row in rows:
        row["visible"] = row["model_id"] in visible
        row["badge"] = STAGE_BADGE.get(row["stage"], "queued")
    return {"template": "registry/_finance_panel.html", "data": {"rows": rows}}


def run_register_panel(request: HttpRequest, run: Run) -> dict[str, Any] | None:
    """"Register checkpoint as a model version" on the run page (registered in RUN_PANELS): shown
    when the run has a checkpoint or an artifact, with the versions already made from it."""
    # Most runs have none of the three: one query says so, rather than one per list.
    found = Run.objects.filter(pk=run.pk).annotate(
        c=Exists(Checkpoint.objects.filter(run=OuterRef("pk"), deleted_at__isnull=True)),
        a=Exists(artifact_list(run=run).filter(run=OuterRef("pk"))),
        v=Exists(ModelVersion.objects.filter(source_run=OuterRef("pk")))).values_list("c", "a", "v").first()
    if found is None or not any(found):
        return None
    # Only what the form's options show: not each checkpoint's metrics nor each artifact's metadata.
    checkpoints = (list(run.checkpoints.filter(deleted_at__isnull=True).order_by("-step").only("pk", "run", "step", "sha256")[:50])
                   if found[0] else [])
    artifacts = list(artifact_list(run=run).only("pk", "name")[:50]) if found[1] else []
    registered = list(ModelVersion.objects.filter(source_run=run).select_related("model")) if found[2] else []
    models = list(selectors.model_list(user=request.user).filter(project_id=run.project_id))
    can_edit = has_role(user=request.user, team_id=run.project.team_id, at_least="engineer")
    return {"template": "registry/_run_panel.html",
            "data": {"run": run, "checkpoints": checkpoints, "artifacts": artifacts, "models": models, "registered": registered,
                     "can_edit": can_edit}}
