"""Pages: /budgets/ (engineers: their projects vs budget), the project-page spend panel, and
/finance/ (finance role and admins only: spend, waste, energy, budgets and quotas in place)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.billing import costmodel, selectors, services
from apps.billing.models import Budget, BudgetAction, Quota, UsageEntry
from apps.core.errors import FieldError, ServiceError
from apps.core.text import is_id
from apps.nodes.models import NodePool
from apps.tenants.models import Project, Team
from apps.tenants.selectors import project_list, user_is_finance

LEDGER_COLUMNS = [
    "id", "created_at", "kind", "period_start", "period_end", "team", "project", "pool", "template", "run_id", "attempt_id",
    "devices", "device_seconds", "price_per_device_hour", "cost", "energy_kwh", "co2_g", "outcome", "note",
]
FILTER_KEYS = ["period", "team", "project", "pool", "template", "run", "kind", "since", "until"]
# Cards that apps above billing add to the finance console (the registry: cost per model version)
# without billing importing them: each registers a callable (request) -> {"template", "data"} or
# None in its AppConfig.ready, as tenants' PROJECT_PANELS.
FINANCE_PANELS: list[Callable[[HttpRequest], dict[str, Any] | None]] = []


def budget_chart(*, status: selectors.BudgetStatus, chart_id: str) -> dict[str, Any]:
    """What static/billing/charts.js draws: cumulative spend, the budget line, the forecast."""
    now = timezone.now()
    return {
        "id": chart_id,
        "days": [day for day, _ in status.burndown],
        "spent": [float(value) for _, value in status.burndown],
        "budget": float(status.budget.amount) if status.budget else None,
        "period_start": status.period.start.date().isoformat(),
        "period_end": status.period.end.date().isoformat(),
        "today": now.date().isoformat(),
        "forecast": float(status.forecast),
        "spent_now": float(status.spent),
    }


def _panel_data(project: Project, *, scripts: bool, status: selectors.BudgetStatus | None = None) -> dict[str, Any]:
    status = status or selectors.project_budget_status(project=project)
    chart_id = f"burndown-{project.pk}"
    return {
        "project": project,
        "status": status,
        "spent": costmodel.to_cents(status.spent),
        "reserved": costmodel.to_cents(status.reserved),
        "forecast": costmodel.to_cents(status.forecast),
        "remaining": status.left.remaining_cents if status.left is not None else None,
        "percent_bar": min(100.0, status.percent or 0.0),
        "over_forecast": status.budget is not None and status.forecast > status.budget.amount,
        "chart": budget_chart(status=status, chart_id=chart_id),
        "chart_id": chart_id,
        "chart_data_id": f"{chart_id}-data",
        "scripts": scripts,
    }


def project_budget_panel(request: HttpRequest, project: Project) -> dict[str, Any] | None:
    """The spend-vs-budget card on the project page (registered in PROJECT_PANELS)."""
    return {"template": "billing/_budget_panel.html", "data": _panel_data(project, scripts=True)}


def _panels(projects: list[Project]) -> list[dict[str, Any]]:
    """Every project's budget card, their figures read together (not a round of queries each)."""
    statuses = selectors.projects_budget_status(projects=projects)
    return [_panel_data(project, scripts=False, status=statuses[project.pk]) for project in projects]


@login_required
def budgets_page(request: HttpRequest) -> HttpResponse:
    panels = _panels(list(project_list(user=request.user)))
    return render(request, "billing/budgets.html", {"panels": panels, "is_finance": user_is_finance(user=request.user)})


def _require_finance(request: HttpRequest) -> None:
    if not request.user.is_authenticated or not user_is_finance(user=request.user):
        raise PermissionDenied("The finance console is for the finance role and admins.")


def _filtered(request: HttpRequest, default_period: str) -> tuple[QuerySet[UsageEntry], dict[str, str], dict[str, list[str]]]:
    params = {k: request.GET.get(k, "").strip() for k in FILTER_KEYS}
    params["period"] = params["period"] or default_period
    entries, errors = selectors.ledger_filter(params=params)
    return entries, params, errors


@dataclass(frozen=True)
class FormFailure:
    """A budget or quota form that was refused: the page is drawn again with what was typed,
    the message next to that form, and its bad fields marked."""

    form_id: str
    values: dict[str, str]
    message: str
    invalid: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormField:
    name: str
    value: str
    invalid: bool = False


@dataclass
class FormRow:
    """One row of the budgets or quotas table: its form's id, its fields, the budget or quota
    it edits (None for the "add" row), and its error, if it was just refused."""

    form_id: str
    fields: dict[str, FormField]
    obj: Any = None
    error: str = ""
    note: str = ""


def _form_row(form_id: str, values: dict[str, str], obj: Any, failure: FormFailure | None) -> FormRow:
    if failure is None or failure.form_id != form_id:
        return FormRow(form_id=form_id, fields={k: FormField(k, v) for k, v in values.items()}, obj=obj)
    typed = {**values, **failure.values}
    fields = {k: FormField(k, v, invalid=k in failure.invalid) for k, v in typed.items()}
    return FormRow(form_id=form_id, fields=fields, obj=obj, error=failure.message)


def _budget_rows(failure: FormFailure | None) -> list[FormRow]:
    rows = [
        _form_row(f"bf-{b.pk}", {"amount": str(b.amount), "thresholds": ", ".join(str(t) for t in b.thresholds), "action": b.action},
                  b, failure)
        for b in selectors.budget_list()
    ]
    blank = {"scope": "", "amount": "", "thresholds": "50, 80, 100", "action": BudgetAction.BLOCK_NEW}
    return [*rows, _form_row("bf-new", blank, None, failure)]


def _quota_rows(failure: FormFailure | None, commitments: dict[int, selectors.PoolCommitment]) -> list[FormRow]:
    rows = []
    for q in selectors.quota_list():
        row = _form_row(f"qf-{q.pk}", {"guaranteed_devices": str(q.guaranteed_devices), "borrow_limit": str(q.borrow_limit)},
                        q, failure)
        pool = commitments.get(q.pool_id)
        row.note = f"{pool.devices} device{'' if pool.devices == 1 else 's'}" if pool else ""
        rows.append(row)
    blank = {"team": "", "pool": "", "guaranteed_devices": "0", "borrow_limit": "0"}
    return [*rows, _form_row("qf-new", blank, None, failure)]


def _top_runs(entries: QuerySet[UsageEntry], user: Any) -> list[dict[str, Any]]:
    rows = selectors.top_runs(entries=entries)
    visible = selectors.runs_visible_to(user=user, run_ids=[r["run_id"] for r in rows])
    return [{**row, "visible": row["run_id"] in visible} for row in rows]


def _options() -> dict[str, list[tuple[str, str]]]:
    """Choices of the "add" rows as (value, label) strings, so a refused form re-selects what was picked."""
    projects = [(str(p.pk), p.full_slug) for p in Project.objects.select_related("team").order_by("team__slug", "slug")]
    teams = list(Team.objects.order_by("slug").values_list("pk", "slug"))
    return {
        "scope": [*projects, *((f"team:{pk}", f"{slug} (whole team)") for pk, slug in teams)],
        "team": [(str(pk), slug) for pk, slug in teams],
        "pool": [(str(pk), name) for pk, name in NodePool.objects.order_by("name").values_list("pk", "name")],
    }


def _finance_context(request: HttpRequest, failure: FormFailure | None = None) -> dict[str, Any]:
    now = timezone.now()
    entries, params, errors = _filtered(request, selectors.period_for(at=now).key)
    if errors:
        for field, msgs in errors.items():
            messages.error(request, f"{field}: {' '.join(msgs)}")
        entries = UsageEntry.objects.none()
    spend = selectors.spend_by_groups(entries=entries, groups=["team", "project", "pool", "template"])
    totals = spend["team"]["rows"]
    panels = _panels(list(Project.objects.select_related("team")))
    query = "&".join(f"{k}={v}" for k, v in params.items() if v)
    commitments = selectors.pool_commitments()
    return {
        "params": params,
        "query": query,
        "spend": spend,
        "spend_charts": [
            {"group": g, "chart_id": f"spend-{g}", "data_id": f"spend-{g}-data", "series": spend[g]["series"]} for g in spend
        ],
        "total_cost": costmodel.to_cents(sum((costmodel.Decimal(r["cost"]) for r in totals), costmodel.ZERO)),
        "panels": panels,
        "families": selectors.family_costs(entries=entries),
        "waste": selectors.waste_by_outcome(entries=entries),
        "energy": selectors.energy_by_team(entries=entries),
        "top_runs": _top_runs(entries, request.user),
        "budget_rows": _budget_rows(failure),
        "quota_rows": _quota_rows(failure, commitments),
        "overcommitted": [c for c in commitments.values() if c.over],
        "teams": Team.objects.all(),
        "projects": Project.objects.select_related("team"),
        "pools": NodePool.objects.all(),
        "actions": BudgetAction.choices,
        "options": _options(),
        "finance_panels": [panel for panel in (make(request) for make in FINANCE_PANELS) if panel],
    }


@login_required
def finance_page(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    return render(request, "billing/finance.html", _finance_context(request))


def _refused(request: HttpRequest, failure: FormFailure) -> HttpResponse:
    # Drawn again rather than redirected: what was typed stays in the form, and the message
    # sits next to it instead of at the top of a long page.
    return render(request, "billing/finance.html", _finance_context(request, failure), status=400)


def _invalid(err: ServiceError, renamed: dict[str, str] | None = None) -> tuple[str, ...]:
    """The form fields a service error names (services say "project", the form says "scope")."""
    renamed = renamed or {}
    return tuple(dict.fromkeys(renamed.get(name, name) for name in err.fields))


def _posted(request: HttpRequest, names: list[str]) -> dict[str, str]:
    return {name: request.POST.get(name, "") for name in names}


BUDGET_SECTION = "/finance/#limits"
QUOTA_SECTION = "/finance/#quota-limits"


@login_required
@require_POST
def finance_budget_save(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    budget = get_object_or_404(Budget.objects.select_related("team", "project"), pk=pk)
    typed = _posted(request, ["amount", "thresholds", "action"])
    try:
        services.budget_update(budget=budget, **typed)
    except ServiceError as err:
        return _refused(request, FormFailure(f"bf-{budget.pk}", typed, f"Budget {budget.scope_label} not saved: {err.message}",
                                             _invalid(err)))
    messages.success(request, f"Budget {budget.scope_label} saved.", extra_tags="limits")
    return HttpResponseRedirect(BUDGET_SECTION)


def _budget_scope(target: str) -> tuple[Team, Project | None]:
    """'team:<id>' for a whole team's budget, else a project id; a FieldError for anything else."""
    if target.startswith("team:") and is_id(target[5:]):
        team = Team.objects.filter(pk=int(target[5:])).first()
        if team is not None:
            return team, None
    elif is_id(target):
        project = Project.objects.select_related("team").filter(pk=int(target)).first()
        if project is not None:
            return project.team, project
    raise FieldError("scope", "choose a project or team")


@login_required
@require_POST
def finance_budget_create(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    typed = _posted(request, ["scope", "amount", "thresholds", "action"])
    try:
        team, project = _budget_scope(typed["scope"])
        budget = services.budget_create(
            team=team,
            project=project,
            amount=typed["amount"],
            thresholds=typed["thresholds"] or None,
            action=typed["action"] or BudgetAction.BLOCK_NEW,
        )
    except ServiceError as err:
        return _refused(request, FormFailure("bf-new", typed, f"Budget not created: {err.message}",
                                             _invalid(err, {"project": "scope", "team": "scope"})))
    messages.success(request, f"Budget {budget.scope_label} created.", extra_tags="limits")
    return HttpResponseRedirect(BUDGET_SECTION)


def _quota_saved(request: HttpRequest, quota: Quota, verb: str) -> HttpResponse:
    done = f"Quota of {quota.team.slug} in {quota.pool.name} {verb}."
    pool = selectors.pool_commitments(pool_ids=[quota.pool_id]).get(quota.pool_id)
    if pool is not None and pool.over:
        # Accepted all the same: pools grow, and guarantees may be over-committed (as in Kueue).
        messages.warning(request, f"{done} Note: {pool.note}, so not every guarantee can be met at once.",
                         extra_tags="quota-limits")
    else:
        messages.success(request, done, extra_tags="quota-limits")
    return HttpResponseRedirect(QUOTA_SECTION)


@login_required
@require_POST
def finance_quota_save(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    quota = get_object_or_404(Quota.objects.select_related("team", "pool"), pk=pk)
    typed = _posted(request, ["guaranteed_devices", "borrow_limit"])
    try:
        quota = services.quota_update(quota=quota, **typed)
    except ServiceError as err:
        return _refused(request, FormFailure(f"qf-{quota.pk}", typed,
                                             f"Quota of {quota.team.slug} in {quota.pool.name} not saved: {err.message}",
                                             _invalid(err)))
    return _quota_saved(request, quota, "saved")


def _pick(model: type[Team] | type[NodePool], field: str, value: str) -> Any:
    found = model.objects.filter(pk=int(value)).first() if is_id(value) else None
    if found is None:
        raise FieldError(field, f"choose a {field}")
    return found


@login_required
@require_POST
def finance_quota_create(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    typed = _posted(request, ["team", "pool", "guaranteed_devices", "borrow_limit"])
    try:
        quota = services.quota_create(team=_pick(Team, "team", typed["team"]), pool=_pick(NodePool, "pool", typed["pool"]),
                                      guaranteed_devices=typed["guaranteed_devices"], borrow_limit=typed["borrow_limit"])
    except ServiceError as err:
        return _refused(request, FormFailure("qf-new", typed, f"Quota not added: {err.message}", _invalid(err)))
    return _quota_saved(request, quota, "added")


_LEDGER_VALUES = (
    "pk", "created_at", "kind", "period_start", "period_end", "team__slug", "project__team__slug", "project__slug", "pool__name",
    "template__slug", "run_id", "attempt_id", "devices", "device_seconds", "price_per_device_hour", "cost", "energy_kwh", "co2_g",
    "outcome", "note",
)


def ledger_rows(entries: QuerySet[UsageEntry]) -> Iterator[list[Any]]:
    yield LEDGER_COLUMNS
    # Plain tuples with the names joined in: the whole ledger may be asked for, and a model
    # instance (with four related ones) per entry cost most of the download's time.
    for (pk, created, kind, start, end, team, project_team, project, pool, template, run_id, attempt_id, devices, device_seconds,
         price, cost, kwh, co2, outcome, note) in entries.values_list(*_LEDGER_VALUES).iterator(chunk_size=2000):
        yield [
            pk, created.isoformat(), kind, start.isoformat(), end.isoformat(), team, f"{project_team}/{project}", pool, template,
            run_id, attempt_id, devices, device_seconds, price, cost, kwh, co2, outcome, note,
        ]


class _Echo:
    def write(self, value: str) -> str:
        return value


def ledger_csv_response(entries: QuerySet[UsageEntry], filename: str = "trainyard-ledger.csv") -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(row) for row in ledger_rows(entries)), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
def finance_ledger_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    _require_finance(request)
    entries, _, errors = _filtered(request, "all")
    if errors:
        return HttpResponse("; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items()), status=400, content_type="text/plain")
    return ledger_csv_response(entries)
