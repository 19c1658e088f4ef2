"""Pages: /budgets/ (engineers: their projects vs budget), the project-page spend panel, and
/finance/ (finance role and admins only: spend, waste, energy, budgets and quotas in place)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
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
from apps.core.errors import ServiceError
from apps.nodes.models import NodePool
from apps.tenants.models import Project, Team
from apps.tenants.selectors import project_list, user_is_finance

LEDGER_COLUMNS = [
    "id", "created_at", "kind", "period_start", "period_end", "team", "project", "pool", "template", "run_id", "attempt_id",
    "devices", "device_seconds", "price_per_device_hour", "cost", "energy_kwh", "co2_g", "outcome", "note",
]
FILTER_KEYS = ["period", "team", "project", "pool", "template", "run", "kind", "since", "until"]


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


def _panel_data(project: Project, *, scripts: bool) -> dict[str, Any]:
    status = selectors.project_budget_status(project=project)
    chart_id = f"burndown-{project.pk}"
    return {
        "project": project,
        "status": status,
        "spent": costmodel.to_cents(status.spent),
        "reserved": costmodel.to_cents(status.reserved),
        "forecast": costmodel.to_cents(status.forecast),
        "remaining": costmodel.to_cents(status.remaining) if status.remaining is not None else None,
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


@login_required
def budgets_page(request: HttpRequest) -> HttpResponse:
    panels = [_panel_data(project, scripts=False) for project in project_list(user=request.user)]
    return render(request, "billing/budgets.html", {"panels": panels, "is_finance": user_is_finance(user=request.user)})


def _require_finance(request: HttpRequest) -> None:
    if not request.user.is_authenticated or not user_is_finance(user=request.user):
        raise PermissionDenied("The finance console is for the finance role and admins.")


def _filtered(request: HttpRequest, default_period: str) -> tuple[QuerySet[UsageEntry], dict[str, str], dict[str, list[str]]]:
    params = {k: request.GET.get(k, "").strip() for k in FILTER_KEYS}
    params["period"] = params["period"] or default_period
    entries, errors = selectors.ledger_filter(params=params)
    return entries, params, errors


@login_required
def finance_page(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    now = timezone.now()
    entries, params, errors = _filtered(request, selectors.period_for(at=now).key)
    if errors:
        for field, msgs in errors.items():
            messages.error(request, f"{field}: {' '.join(msgs)}")
        entries = UsageEntry.objects.none()
    spend = {group: selectors.spend_by(entries=entries, group_by=group) for group in ("team", "project", "pool", "template")}
    totals = spend["team"]["rows"]
    panels = [_panel_data(project, scripts=False) for project in Project.objects.select_related("team")]
    query = "&".join(f"{k}={v}" for k, v in params.items() if v)
    return render(
        request,
        "billing/finance.html",
        {
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
            "top_runs": selectors.top_runs(entries=entries),
            "budgets": selectors.budget_list(),
            "quotas": selectors.quota_list(),
            "teams": Team.objects.all(),
            "projects": Project.objects.select_related("team"),
            "pools": NodePool.objects.all(),
            "actions": BudgetAction.choices,
        },
    )


def _back(request: HttpRequest) -> HttpResponseRedirect:
    return HttpResponseRedirect("/finance/#limits")


@login_required
@require_POST
def finance_budget_save(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    budget = get_object_or_404(Budget, pk=pk)
    try:
        services.budget_update(
            budget=budget,
            amount=request.POST.get("amount", ""),
            thresholds=request.POST.get("thresholds", ""),
            action=request.POST.get("action", ""),
        )
        messages.success(request, f"Budget {budget.scope_label} saved.")
    except ServiceError as err:
        messages.error(request, f"Budget {budget.scope_label} not saved: {err.message}")
    return _back(request)


@login_required
@require_POST
def finance_budget_create(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    target = request.POST.get("scope", "")
    try:
        if target.startswith("team:"):
            team = get_object_or_404(Team, pk=int(target[5:]))
            project = None
        else:
            project = get_object_or_404(Project.objects.select_related("team"), pk=int(target or 0))
            team = project.team
        budget = services.budget_create(
            team=team,
            project=project,
            amount=request.POST.get("amount", ""),
            thresholds=request.POST.get("thresholds") or None,
            action=request.POST.get("action") or BudgetAction.BLOCK_NEW,
        )
        messages.success(request, f"Budget {budget.scope_label} created.")
    except ValueError:
        messages.error(request, "Budget not created: choose a project or team.")
    except ServiceError as err:
        messages.error(request, f"Budget not created: {err.message}")
    return _back(request)


@login_required
@require_POST
def finance_quota_save(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    quota = get_object_or_404(Quota.objects.select_related("team", "pool"), pk=pk)
    try:
        services.quota_update(
            quota=quota,
            guaranteed_devices=request.POST.get("guaranteed_devices", ""),
            borrow_limit=request.POST.get("borrow_limit", ""),
        )
        messages.success(request, f"Quota of {quota.team.slug} in {quota.pool.name} saved.")
    except ServiceError as err:
        messages.error(request, f"Quota not saved: {err.message}")
    return _back(request)


@login_required
@require_POST
def finance_quota_create(request: HttpRequest) -> HttpResponse:
    _require_finance(request)
    team = Team.objects.filter(pk=request.POST.get("team") or 0).first() if (request.POST.get("team") or "").isdigit() else None
    pool = NodePool.objects.filter(pk=request.POST.get("pool") or 0).first() if (request.POST.get("pool") or "").isdigit() else None
    if team is None or pool is None:
        messages.error(request, "Quota not saved: choose a team and a pool.")
        return _back(request)
    try:
        services.quota_set(team=team, pool=pool, guaranteed_devices=request.POST.get("guaranteed_devices", ""),
                           borrow_limit=request.POST.get("borrow_limit", ""))
        messages.success(request, f"Quota of {team.slug} in {pool.name} saved.")
    except ServiceError as err:
        messages.error(request, f"Quota not saved: {err.message}")
    return _back(request)


def ledger_rows(entries: QuerySet[UsageEntry]) -> Iterator[list[Any]]:
    yield LEDGER_COLUMNS
    for e in entries.iterator(chunk_size=2000):
        yield [
            e.pk, e.created_at.isoformat(), e.kind, e.period_start.isoformat(), e.period_end.isoformat(), e.team.slug,
            e.project.full_slug, e.pool.name, e.template.slug, e.run_id, e.attempt_id, e.devices, e.device_seconds,
            e.price_per_device_hour, e.cost, e.energy_kwh, e.co2_g, e.outcome, e.note,
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
