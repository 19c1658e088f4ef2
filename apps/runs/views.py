"""HTML: the run submission form (/runs/new/). The run page itself lives in apps.tracking."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render

from apps.core.errors import ServiceError
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.jobtemplates.selectors import template_list
from apps.nodes.models import NodePool, NodeState
from apps.runs.api.views import project_from_ref, snapshot_from_ref
from apps.runs.forms import (
    RESOURCE_FIELDS,
    TAG_FIELDS,
    expected_cost,
    extra_tags_from_text,
    form_reloaded,
    param_fields,
    params_from_post,
    resources_from_post,
    tag_defaults,
)
from apps.runs.models import Checkpoint, CodeSnapshot, Priority
from apps.runs.selectors import run_list
from apps.runs.services.submit import CANDIDATE_VALUES, INIT_KINDS, Errors, run_submit, submission_check
from apps.runs.services.sweep import sweep_trial_count
from apps.tenants.models import Project
from apps.tenants.selectors import has_role, project_list

KNOWN_INPUTS = {"project", "template", "priority", "name", "init_run", "init_checkpoint", "code_snapshot", "extra_tags", "secrets"}
# A hidden input: the template whose form was on the page, so a reload for another one can tell what
# the user changed from what was only that template's default.
SHOWN_TEMPLATE = "shown_template"
# The vault registers here, in its AppConfig.ready(), a callable (project=...) -> the names of the
# project's secrets, so the form can offer them without this app importing the vault (which
# imports runs for its admission check).
SECRET_NAME_SOURCES: list[Callable[..., list[str]]] = []
FIELD_PREFIXES = {"params.": "p_", "tags.": "tag_", "resources.": "res_"}


def _input_for(field: str) -> str:
    for prefix, replacement in FIELD_PREFIXES.items():
        if field.startswith(prefix):
            return replacement + field[len(prefix):].split(".")[0]
    return field


def _engineer_projects(request: HttpRequest) -> list[Project]:
    projects = list(project_list(user=request.user))
    # The role is the team's, so asked once per team rather than once per project.
    teams = {team_id for team_id in {p.team_id for p in projects} if has_role(user=request.user, team_id=team_id, at_least="engineer")}
    return [p for p in projects if p.team_id in teams]


@login_required
def run_new_page(request: HttpRequest) -> HttpResponse:
    projects = _engineer_projects(request)
    templates = list(template_list(user=request.user, published_only=True))
    source = request.POST if request.method == "POST" else request.GET
    project = next((p for p in projects if str(p.pk) == source.get("project")), projects[0] if projects else None)
    wanted = source.get("template") or "digits-classifier"
    template: JobTemplate | None = next((t for t in templates if t.slug == wanted), templates[0] if templates else None)
    errors: dict[str, list[str]] = {}
    values: dict[str, Any] = {}
    status = 200
    post: QueryDict | None = request.POST if request.method == "POST" else None
    if post is not None and post.get("action") == "reload":
        # Another project or template was chosen: the same form for it, not a submission (so no errors).
        if template is not None:
            # Without the shown template (a page from before it was sent), what differs from the new
            # template's defaults is taken as typed.
            shown = next((t for t in templates if t.slug == post.get(SHOWN_TEMPLATE)), template)
            post, values = form_reloaded(old=shown, new=template, post=post, username=request.user.get_username())
    elif post is not None and project is not None and template is not None:
        params, values, errors = params_from_post(template=template, post=request.POST)
        if str(project.pk) != request.POST.get("project"):
            # Never fall back to another project on a POST: the run would land somewhere unasked.
            errors.setdefault("project", []).append("no such project")
        tags = {key: request.POST.get(f"tag_{key}", "").strip() for key in TAG_FIELDS}
        extra, tag_errors = extra_tags_from_text(request.POST.get("extra_tags", ""))
        if tag_errors:
            errors.setdefault("extra_tags", []).extend(tag_errors)
        if errors:
            # The form's own errors must not hide the rest: check what the submission would, unsaved.
            _more_errors(request, template=template, params=params, tags={**extra, **{k: v for k, v in tags.items() if v}},
                         errors=errors)
        else:
            try:
                run = run_submit(
                    project=project_from_ref(user=request.user, ref=project.pk),
                    template=template,
                    params=params,
                    tags={**extra, **{k: v for k, v in tags.items() if v}},
                    priority=request.POST.get("priority") or Priority.NORMAL,
                    resources=resources_from_post(request.POST),
                    user=request.user,
                    name=request.POST.get("name", "").strip(),
                    init_run=request.POST.get("init_run", "").strip() or None,
                    code_snapshot=snapshot_from_ref(project=project, ref=request.POST.get("code_snapshot", "").strip()),
                    secrets=request.POST.getlist("secrets"),
                )
            except ServiceError as err:
                errors = {key: list(msgs) for key, msgs in err.fields.items()} or {"non_field_errors": [err.message]}
            else:
                return redirect(f"/runs/{run.pk}/")
        status = 400
    context = _context(request, post=post, projects=projects, templates=templates, project=project, template=template,
                       values=values, errors=errors)
    return render(request, "runs/submit.html", context, status=status)


def _more_errors(request: HttpRequest, *, template: JobTemplate, params: dict[str, Any], tags: dict[str, str],
                 errors: dict[str, list[str]]) -> None:
    more = Errors()
    extras = {"name": request.POST.get("name", "").strip(), "tags": tags,
              "init_run": request.POST.get("init_run", "").strip() or None, "init_checkpoint": None}
    submission_check(user=request.user, template=template, params=params,
                     priority=request.POST.get("priority") or Priority.NORMAL, resources=resources_from_post(request.POST),
                     errors=more, extras=extras)
    for field, messages in more.fields.items():
        known = errors.setdefault(field, [])
        known.extend(m for m in messages if m not in known)


def _context(request: HttpRequest, *, post: QueryDict | None, projects: list[Project], templates: list[JobTemplate],
             project: Project | None, template: JobTemplate | None, values: dict[str, Any],
             errors: dict[str, list[str]]) -> dict[str, Any]:
    by_input: dict[str, list[str]] = {}
    for field, messages in errors.items():
        by_input.setdefault(_input_for(field), []).extend(messages)
    fields = param_fields(template=template, values=values or None) if template else []
    for f in fields:
        f.errors = by_input.pop(f.input_name, [])
    defaults = dict((template.resources if template else {}) or {})
    resources = {name: (post.get(f"res_{name}") if post is not None else None) or defaults.get(name, "") for name in RESOURCE_FIELDS}
    # Pools whose nodes are all offline or draining stay choosable (a run may wait for them) but say so.
    pools = list(NodePool.objects.order_by("name").annotate(
        ready=Count("nodes", filter=Q(nodes__state=NodeState.READY))))
    pool = next((p for p in pools if p.name == resources["pool"]), None)
    cost = None
    try:
        cost = expected_cost(price=pool.price_per_device_hour if pool else Decimal(0), nodes=int(resources["nodes"] or 1),
                             devices_per_node=int(resources["devices_per_node"] or 1),
                             max_runtime_s=int(resources["max_runtime_s"] or 0))
    except (TypeError, ValueError):
        cost = None
    is_sweep = template is not None and template.kind == TemplateKind.SWEEP
    trials = _sweep_trials(template, post) if template is not None and is_sweep else None
    user = request.user
    tag_values = tag_defaults(template=template, username=user.get_username())
    tags = {key: (post.get(f"tag_{key}") if post is not None else None) or tag_values[key] for key in TAG_FIELDS}
    tag_rows = [{"key": key, "value": tags[key], "errors": by_input.pop(f"tag_{key}", [])} for key in TAG_FIELDS]
    resource_rows = [{"key": key, "value": resources[key], "errors": by_input.pop(f"res_{key}", [])} for key in RESOURCE_FIELDS]
    init_runs: list[Any] = []
    snapshots: list[CodeSnapshot] = []
    if template is not None and template.kind in INIT_KINDS:
        with_ckpt = Checkpoint.objects.filter(deleted_at__isnull=True).values("run_id")
        init_runs = list(run_list(user=user).filter(pk__in=with_ckpt).order_by("-created_at")[:50])
    if template is not None and template.kind == TemplateKind.CUSTOM and project is not None:
        snapshots = list(CodeSnapshot.objects.filter(project=project).order_by("-created_at")[:50])
    secret_names = _secret_names(project)
    return {
        "projects": projects,
        "templates": templates,
        "project": project,
        "template": template,
        "fields": fields,
        "tag_rows": tag_rows,
        "resource_rows": resource_rows,
        "candidate_values": CANDIDATE_VALUES,
        "priorities": Priority.choices,
        "priority": (post.get("priority") if post is not None else None) or Priority.NORMAL,
        "name": post.get("name", "") if post is not None else "",
        "extra_tags": post.get("extra_tags", "") if post is not None else "",
        "pools": pools,
        "cost": cost,
        "is_sweep": is_sweep,
        "trials": trials,
        "sweep_cost": cost * trials if cost is not None and trials is not None else None,
        "secret_names": secret_names,
        # Ticks of names the project lacks have no box to show them (after a change of project, say).
        "secrets_chosen": [name for name in post.getlist("secrets") if name in secret_names] if post is not None else [],
        "init_runs": init_runs,
        "init_run": post.get("init_run", "") if post is not None else request.GET.get("init_run", ""),
        "snapshots": snapshots,
        "code_snapshot": post.get("code_snapshot", "") if post is not None else "",
        "field_errors": by_input,
        "other_errors": [f"{key}: {msg}" for key, msgs in by_input.items() if key not in KNOWN_INPUTS for msg in msgs],
        "has_errors": bool(errors),
        "needs_init": template is not None and template.kind in INIT_KINDS,
        "is_custom": template is not None and template.kind == TemplateKind.CUSTOM,
    }


def _sweep_trials(template: JobTemplate, post: Any) -> int | None:
    """The trials the sweep in the form (posted, or the defaults) would queue; None while it is invalid."""
    params = params_from_post(template=template, post=post)[0] if post is not None else {}
    try:
        return sweep_trial_count(schema=template.param_schema or {}, params=params)
    except ServiceError:
        return None


def _secret_names(project: Project | None) -> list[str]:
    if project is None:
        return []
    return sorted({name for source in SECRET_NAME_SOURCES for name in source(project=project)})
