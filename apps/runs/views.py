"""HTML: the run submission form (/runs/new/). The run page itself lives in apps.tracking."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.core.errors import Forbidden, ServiceError
from apps.core.text import is_id
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.jobtemplates.selectors import template_list, template_versions
from apps.nodes.closed import open_pools
from apps.nodes.models import NodePool, NodeState
from apps.runs.drafts import annotate_draft_keep
from apps.runs.forms import (
    CARRIED_RESOURCES,
    RESOURCE_FIELDS,
    TAG_FIELDS,
    TEMPLATE_VERSION,
    expected_cost,
    extra_tags_from_text,
    form_from_run,
    form_reloaded,
    param_fields,
    params_from_post,
    submission_from_post,
    tag_defaults,
)
from apps.runs.models import Checkpoint, CodeSnapshot, Priority, Run
from apps.runs.selectors import run_list
from apps.runs.services.rerun import CLONE_TAG, RERUN_TAG, run_annotate, run_clone_record, run_rerun
from apps.runs.services.submission import CANDIDATE_VALUES, INIT_KINDS, TEXT_INPUTS, submission_validate
from apps.runs.services.submit import run_submit
from apps.runs.services.sweep import sweep_trial_count
from apps.tenants.models import Project
from apps.tenants.selectors import has_role, project_list

NON_FIELD_ERRORS = "non_field_errors"
KNOWN_INPUTS = {"project", "template", "priority", "init_run", "init_checkpoint", "code_snapshot", "extra_tags", "secrets"}
# The form's hidden input naming the run it was cloned from (/runs/new/?from=<id>).
CLONE_SOURCE = "from"
# A hidden input: the template whose form was on the page, so a reload for another one can tell what
# the user changed from what was only that template's default.
SHOWN_TEMPLATE = "shown_template"
# The vault registers here, in its AppConfig.ready(), a callable (project=...) -> the names of the
# project's secrets, so the form can offer them without this app importing the vault (which
# imports runs for its admission check).
SECRET_NAME_SOURCES: list[Callable[..., list[str]]] = []
FIELD_PREFIXES = {"params.": "p_", "tags.": "tag_", "resources.": "res_"}
T = TypeVar("T")


def _input_for(field: str) -> str:
    for prefix, replacement in FIELD_PREFIXES.items():
        if field.startswith(prefix):
            return replacement + field[len(prefix):].split(".")[0]
    return field


def _named_inside(field: str, messages: list[str]) -> list[str]:
    """An error inside one input's value (params.objective.metrc under p_objective) names the part it is about."""
    for prefix in FIELD_PREFIXES:
        inner = field.removeprefix(prefix)
        if inner != field and "." in inner:
            return [f"{inner}: {message}" for message in messages]
    return messages


def _engineer_projects(request: HttpRequest) -> list[Project]:
    projects = list(project_list(user=request.user))
    # The role is the team's, so asked once per team rather than once per project.
    teams = {team_id for team_id in {p.team_id for p in projects} if has_role(user=request.user, team_id=team_id, at_least="engineer")}
    return [p for p in projects if p.team_id in teams]


def _chosen(items: Sequence[T], key: Callable[[T], str], wanted: Any) -> T | None:
    """The item asked for, else the first (None when there is none)."""
    return next((item for item in items if key(item) == wanted), items[0] if items else None)


@login_required
def run_new_page(request: HttpRequest) -> HttpResponse:
    post: QueryDict | None = request.POST if request.method == "POST" else None
    clone = _clone_source(request, post if post is not None else request.GET)
    if post is None and clone is not None:
        # Clone and edit: the form as the run was submitted, tagged cloned_from=<id>.
        prefill, values = form_from_run(run=clone, link_tag=CLONE_TAG)
        return _submit_page(request, shown=prefill, values=values, errors={}, clone=clone)
    return _submit_page(request, shown=post, values={}, errors={}, clone=clone, posted=post is not None)


def _submit_page(request: HttpRequest, *, shown: QueryDict | None, values: dict[str, Any], errors: dict[str, list[str]],
                 clone: Run | None = None, posted: bool = False, notice: str = "") -> HttpResponse:
    """The submit page for ``shown`` (a post, or a run's inputs), submitting it when ``posted``."""
    projects = _engineer_projects(request)
    templates = list(template_list(user=request.user, published_only=True))
    source = shown if shown is not None else request.GET
    project = _chosen(projects, lambda p: str(p.pk), source.get("project"))
    template = _pinned(request, _chosen(templates, lambda t: t.slug, source.get("template") or "digits-classifier"), source)
    if posted and shown is not None and shown.get("action") == "reload":
        # Another project or template was chosen: the same form for it, not a submission (so no errors).
        shown, values = _reloaded(request, post=shown, templates=templates, template=template)
    elif posted and project is not None and template is not None:
        outcome = _submit(request, project=project, template=template)
        if isinstance(outcome, Run):
            if clone is not None:
                run_clone_record(source=clone, run=outcome)
            return redirect(f"/runs/{outcome.pk}/")
        values, errors = outcome
    context = _context(request, post=shown, projects=projects, templates=templates, project=project, template=template,
                       values=values, errors=errors)
    context.update({"clone_from": clone, "notice": notice})
    return render(request, "runs/submit.html", context, status=400 if errors else 200)


def _pinned(request: HttpRequest, template: JobTemplate | None, source: QueryDict) -> JobTemplate | None:
    """The published version of ``template``'s slug that the form pins (a clone keeps its source's
    version), else ``template``, the latest."""
    slug, _, version = source.get(TEMPLATE_VERSION, "").strip().rpartition("@")
    if template is None or slug != template.slug or not is_id(version) or int(version) == template.version:
        return template
    return template_versions(user=request.user, slug=template.slug).filter(version=int(version), published=True).first() or template


def _clone_source(request: HttpRequest, source: QueryDict) -> Run | None:
    """The run named by the form's `from` (one the user can see; any other is a 404)."""
    ref = source.get(CLONE_SOURCE, "").strip()
    if not ref:
        return None
    if not is_id(ref):
        raise Http404("no such run")
    return get_object_or_404(run_list(user=request.user).select_related("template", "project", "pool"), pk=int(ref))


@login_required
@require_POST
def run_rerun_page(request: HttpRequest, pk: int) -> HttpResponse:
    """Rerun from the run's page: the new run's page, or (refused, by a budget say) the submit
    page filled in as the rerun was, with the refusal shown as any submission's."""
    run = get_object_or_404(run_list(user=request.user).select_related("template", "project", "pool"), pk=pk)
    try:
        new = run_rerun(run=run, user=request.user)
    except Forbidden as err:
        raise PermissionDenied(err.message) from err
    except ServiceError as err:
        shown, values = form_from_run(run=run, link_tag=RERUN_TAG)
        del shown[CLONE_SOURCE]
        errors = {field: list(texts) for field, texts in (err.fields or {NON_FIELD_ERRORS: [err.message]}).items()}
        return _submit_page(request, shown=shown, values=values, errors=errors,
                            notice=f"The rerun of run #{run.pk}, filled in as it was submitted, was refused.")
    return redirect(f"/runs/{new.pk}/")


@login_required
@require_POST
def run_annotate_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The run page's notes and tags form (tags as key=value lines); back to the run's page,
    with what was saved or refused said at its top."""
    run = get_object_or_404(run_list(user=request.user).select_related("project"), pk=pk)
    notes, tags_text = request.POST.get("notes", "").replace("\r\n", "\n"), request.POST.get("tags", "").replace("\r\n", "\n")
    tags, problems = extra_tags_from_text(tags_text)
    errors = [f"Tags: {problem}" for problem in problems]
    if not errors:
        try:
            run_annotate(run=run, user=request.user, notes=notes, tags=tags)
        except Forbidden as err:
            raise PermissionDenied(err.message) from err
        except ServiceError as err:
            errors = [f"{field.replace('_', ' ').replace('.', ' ').capitalize()}: {message}"
                      for field, field_messages in err.fields.items() for message in field_messages] or [err.message]
    if errors:
        for error in errors:
            flash.error(request, error)
        # The run page shows the form open again with what was typed, not the saved notes.
        annotate_draft_keep(request, run_id=run.pk, notes=notes, tags=tags_text, errors=errors)
        return redirect(f"/runs/{run.pk}/")
    flash.success(request, "Notes and tags saved.")
    return redirect(f"/runs/{run.pk}/")


def _reloaded(request: HttpRequest, *, post: QueryDict, templates: list[JobTemplate],
              template: JobTemplate | None) -> tuple[QueryDict, dict[str, Any]]:
    if template is None:
        return post, {}
    # Without the shown template (a page from before it was sent), what differs from the new
    # template's defaults is taken as typed.
    shown = next((t for t in templates if t.slug == post.get(SHOWN_TEMPLATE)), template)
    return form_reloaded(old=shown, new=template, post=post, username=request.user.get_username())


def _submit(request: HttpRequest, *, project: Project, template: JobTemplate) -> Run | tuple[dict[str, Any], dict[str, list[str]]]:
    """The run queued, or (the raw values to show again, the errors by field)."""
    posted = submission_from_post(project=project, template=template, post=request.POST)
    errors = {field: list(messages) for field, messages in posted.errors.items()}
    try:
        if not errors:
            return run_submit(submission=posted.submission, user=request.user)
        # The form's own errors must not hide the rest: check what the submission would, unsaved.
        submission_validate(submission=posted.submission, user=request.user)
    except ServiceError as err:
        for field, messages in (err.fields or {NON_FIELD_ERRORS: [err.message]}).items():
            known = errors.setdefault(field, [])
            known.extend(m for m in messages if m not in known)
    return posted.values, errors


def _other_errors(by_input: dict[str, list[str]]) -> list[str]:
    """Errors no input on the page shows, each once, in words: those of the whole submission
    (a budget refusal) as they are; another field's named by its label, never its raw key."""
    out: list[str] = []
    for key, messages in by_input.items():
        if key in KNOWN_INPUTS:
            continue
        label = "" if key == NON_FIELD_ERRORS else key.replace("_", " ").replace(".", " ").capitalize() + ": "
        out.extend(f"{label}{message}" for message in messages if f"{label}{message}" not in out)
    return out


def _context(request: HttpRequest, *, post: QueryDict | None, projects: list[Project], templates: list[JobTemplate],
             project: Project | None, template: JobTemplate | None, values: dict[str, Any],
             errors: dict[str, list[str]]) -> dict[str, Any]:
    shown = post if post is not None else QueryDict()
    by_input: dict[str, list[str]] = {}
    for field, messages in errors.items():
        by_input.setdefault(_input_for(field), []).extend(_named_inside(field, messages))
    # The rows take their inputs' errors; what is left is shown by its input or at the top.
    rows = _input_rows(request, shown=shown, template=template, values=values, by_input=by_input)
    kind = template.kind if template is not None else None
    secret_names = _secret_names(project)
    return {
        "projects": projects,
        "templates": templates,
        "project": project,
        "template": template,
        **rows,
        **_cost_context(template=template, post=post, resources=rows["resources"]),
        "candidate_values": CANDIDATE_VALUES,
        "priorities": Priority.choices,
        "priority": shown.get("priority") or Priority.NORMAL,
        "extra_tags": shown.get("extra_tags", ""),
        "secret_names": secret_names,
        # Ticks of names the project lacks have no box to show them (after a change of project, say).
        "secrets_chosen": [name for name in shown.getlist("secrets") if name in secret_names],
        "init_runs": _init_runs(request, kind),
        "init_run": (post if post is not None else request.GET).get("init_run", ""),
        "snapshots": _snapshots(project, kind),
        "code_snapshot": shown.get("code_snapshot", ""),
        # What a clone carries that the form has no input for: hidden, submitted as they were.
        "carried": [(f"res_{name}", value) for name in CARRIED_RESOURCES if (value := shown.get(f"res_{name}", ""))]
        + ([(TEMPLATE_VERSION, f"{template.slug}@{template.version}")]
           if template is not None and shown.get(TEMPLATE_VERSION) == f"{template.slug}@{template.version}" else []),
        "field_errors": by_input,
        "other_errors": _other_errors(by_input),
        "has_errors": bool(errors),
        "needs_init": kind in INIT_KINDS,
        "is_custom": kind == TemplateKind.CUSTOM,
    }


def _input_rows(request: HttpRequest, *, shown: QueryDict, template: JobTemplate | None, values: dict[str, Any],
                by_input: dict[str, list[str]]) -> dict[str, Any]:
    """The parameter, text, tag and resource inputs with their values and errors (taken from ``by_input``)."""
    fields = param_fields(template=template, values=values or None) if template else []
    for f in fields:
        f.errors = by_input.pop(f.input_name, [])
    defaults = dict((template.resources if template else {}) or {})
    resources = {name: shown.get(f"res_{name}") or defaults.get(name, "") for name in RESOURCE_FIELDS}
    tag_values = tag_defaults(template=template, username=request.user.get_username())
    tags = {key: shown.get(f"tag_{key}") or tag_values[key] for key in TAG_FIELDS}
    return {
        "fields": fields,
        "resources": resources,
        "text_rows": [{"input": text, "value": shown.get(text.name, ""), "errors": by_input.pop(text.name, [])}
                      for text in TEXT_INPUTS],
        "tag_rows": [{"key": key, "value": tags[key], "errors": by_input.pop(f"tag_{key}", [])} for key in TAG_FIELDS],
        "resource_rows": [{"key": key, "value": resources[key], "errors": by_input.pop(f"res_{key}", [])}
                          for key in RESOURCE_FIELDS],
    }


def _cost_context(*, template: JobTemplate | None, post: QueryDict | None, resources: dict[str, Any]) -> dict[str, Any]:
    # Pools whose nodes are all offline or draining stay choosable (a run may wait for them) but say so.
    # Pools that run nothing (apps.nodes.closed: MLflow's tracked) are no choice at all.
    pools = list(open_pools().annotate(
        ready=Count("nodes", filter=Q(nodes__state=NodeState.READY))))
    cost = _cost(pools, resources)
    is_sweep = template is not None and template.kind == TemplateKind.SWEEP
    trials = _sweep_trials(template, post) if template is not None and is_sweep else None
    return {"pools": pools, "cost": cost, "is_sweep": is_sweep, "trials": trials,
            "sweep_cost": cost * trials if cost is not None and trials is not None else None}


def _cost(pools: Sequence[NodePool], resources: dict[str, Any]) -> Decimal | None:
    """The most the run in the form can cost; None while its resources are not numbers."""
    pool = next((p for p in pools if p.name == resources["pool"]), None)
    try:
        return expected_cost(price=pool.price_per_device_hour if pool else Decimal(0), nodes=int(resources["nodes"] or 1),
                             devices_per_node=int(resources["devices_per_node"] or 1),
                             max_runtime_s=int(resources["max_runtime_s"] or 0))
    except (TypeError, ValueError):
        return None


def _init_runs(request: HttpRequest, kind: str | None) -> list[Any]:
    """Runs a fine-tune or evaluation could start from: those with a checkpoint."""
    if kind not in INIT_KINDS:
        return []
    with_ckpt = Checkpoint.objects.filter(deleted_at__isnull=True).values("run_id")
    return list(run_list(user=request.user).filter(pk__in=with_ckpt).order_by("-created_at")[:50])


def _snapshots(project: Project | None, kind: str | None) -> list[CodeSnapshot]:
    if kind != TemplateKind.CUSTOM or project is None:
        return []
    return list(CodeSnapshot.objects.filter(project=project).order_by("-created_at")[:50])


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
