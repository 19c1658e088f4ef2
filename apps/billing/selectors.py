"""Reads over prices, the ledger and budgets. Money is summed from the ledger, never cached."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from django.apps import apps as django_apps
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import CharField, Count, DecimalField, Func, Min, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from apps.billing import costmodel
from apps.billing.costmodel import ZERO, PricePoint
from apps.billing.models import Budget, BudgetAlert, EntryKind, PoolPrice, Quota, UsageEntry
from apps.core.dates import datetime_utc
from apps.core.errors import FieldError
from apps.core.text import is_id, plural
from apps.nodes.models import Device, NodePool
from apps.runs.models import FINISHED_STATUSES, Attempt, Run, RunStatus
from apps.runs.selectors import run_list
from apps.runs.services.runtime import runs_expected_runtimes
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser

WASTE_OUTCOMES = ("failed", "cancelled", "lost")


@dataclass(frozen=True)
class Period:
    key: str
    label: str
    start: datetime
    end: datetime


def period_for(*, at: datetime) -> Period:
    start = costmodel.month_start(at)
    return Period(key=f"{start:%Y-%m}", label=f"{start:%B %Y}", start=start, end=costmodel.next_month_start(start))


def period_parse(*, key: str) -> Period | None:
    """'2026-11' -> that month; None when the key is not a month."""
    try:
        start = datetime.strptime(key, "%Y-%m").replace(tzinfo=costmodel.EPOCH.tzinfo)
    except ValueError:
        return None
    return period_for(at=start)


def pool_price_points(*, pool: NodePool) -> list[PricePoint]:
    """The pool's dated prices; a pool that never had one is charged its list price throughout."""
    points = [
        PricePoint(effective_from=p.effective_from, price=p.price_per_device_hour)
        for p in PoolPrice.objects.filter(pool=pool).order_by("effective_from")
    ]
    return points or [PricePoint(effective_from=costmodel.EPOCH, price=pool.price_per_device_hour)]


def pool_price_now(*, pool: NodePool, at: datetime | None = None) -> Decimal:
    return costmodel.price_in_force(pool_price_points(pool=pool), at or timezone.now())


def budgets_for_project(*, project: Project) -> list[Budget]:
    """The project's own budget and its team's, in primary-key order (the locking order)."""
    return budgets_for_projects(projects=[project])[project.pk]


def budgets_for_projects(*, projects: Iterable[Project]) -> dict[int, list[Budget]]:
    """budgets_for_project of each project, by project id, in one query."""
    projects = list(projects)
    budgets = list(
        Budget.objects.filter(Q(project_id__in={p.pk for p in projects}) | Q(team_id__in={p.team_id for p in projects},
                                                                              project__isnull=True))
        .select_related("team", "project", "project__team")
        .order_by("pk")
    )
    return {p.pk: [b for b in budgets if b.project_id == p.pk or (b.project_id is None and b.team_id == p.team_id)]
            for p in projects}


def budget_spent(*, budget: Budget, period: Period) -> Decimal:
    return budgets_spent(budgets=[budget], period=period)[budget.pk]


def budgets_spent(*, budgets: Iterable[Budget], period: Period) -> dict[int, Decimal]:
    """budget_spent of each budget, by budget id: one grouped sum for project budgets and one for
    team budgets, however many there are (a scheduling pass checks every waiting project's)."""
    budgets = list(budgets)
    in_period = UsageEntry.objects.filter(period_start__gte=period.start, period_start__lt=period.end)
    sums: dict[str, dict[int, Decimal]] = {}
    for scope in ("project_id", "team_id"):
        ids = {getattr(b, scope) for b in budgets if bool(b.project_id) == (scope == "project_id")}
        rows = in_period.filter(**{f"{scope}__in": ids}).order_by().values(scope).annotate(s=Sum("cost")).values_list(scope, "s")
        sums[scope] = {key: _ledger_sum(total) for key, total in rows} if ids else {}
    return {b.pk: (sums["project_id"].get(b.project_id) if b.project_id else sums["team_id"].get(b.team_id)) or ZERO
            for b in budgets}


def run_predicted_devices(*, run: Run) -> int:
    # A sweep's controller run holds no devices (devices_per_node 0) and so reserves nothing.
    return int(run.nodes or 0) * int(run.devices_per_node or 0)


@dataclass(frozen=True)
class CostForecast:
    """What a run is predicted to cost: predicted runtime × devices × price (the runtime capped
    at its max runtime; the max runtime itself where there is no history to predict from)."""

    cost: Decimal
    devices: int
    price: Decimal
    runtime_s: float
    basis: str


def runs_predicted_cost(*, runs: Sequence[Run], prices: dict[int, Decimal] | None = None) -> list[CostForecast]:
    prices = {} if prices is None else prices
    out = []
    for run, runtime in zip(runs, runs_expected_runtimes(runs=runs), strict=True):
        if run.pool_id not in prices:
            prices[run.pool_id] = pool_price_now(pool=run.pool)
        devices = run_predicted_devices(run=run)
        cost = costmodel.predicted_cost(devices=devices, runtime_s=int(round(runtime.seconds)), price=prices[run.pool_id])
        out.append(CostForecast(cost=cost, devices=devices, price=prices[run.pool_id], runtime_s=runtime.seconds,
                                basis=runtime.basis))
    return out


def budget_reserved(*, budget: Budget, exclude_run_id: int | None = None) -> Decimal:
    """What admitted-but-unfinished runs may still spend: predicted cost less what they spent."""
    return budgets_reserved(budgets=[budget], exclude_run_id=exclude_run_id)[budget.pk]


def budgets_reserved(*, budgets: Sequence[Budget], exclude_run_id: int | None = None) -> dict[int, Decimal]:
    """budget_reserved for several budgets at once, by budget id: the unfinished runs of all
    their scopes are read, spent and predicted together (one runtime history for all of them),
    so a page of every project's budget costs the same few queries as one."""
    out = {b.pk: ZERO for b in budgets}
    projects = {b.project_id for b in budgets if b.project_id}
    teams = {b.team_id for b in budgets if not b.project_id}
    if not budgets:
        return out
    runs = Run.objects.exclude(status__in=FINISHED_STATUSES).filter(Q(project_id__in=projects) | Q(project__team_id__in=teams))
    runs = runs.filter(tracked_only=False)  # logged by an outside client (MLflow): it costs nothing
    if exclude_run_id is not None:
        runs = runs.exclude(pk=exclude_run_id)
    # Prefetched, not joined: the queue may hold hundreds of runs of a few templates, and a
    # joined template (its JSON schema decoded again) per run cost more than the rest together.
    run_list = list(runs.prefetch_related("pool", "project__team", "template"))
    if not run_list:
        return out
    spent = dict(
        UsageEntry.objects.filter(run_id__in=[r.pk for r in run_list]).values("run_id").annotate(s=Sum("cost")).values_list("run_id", "s")
    )
    by_project: dict[int, Decimal] = defaultdict(lambda: ZERO)
    by_team: dict[int, Decimal] = defaultdict(lambda: ZERO)
    for run, forecast in zip(run_list, runs_predicted_cost(runs=run_list), strict=True):
        left = max(ZERO, forecast.cost - (spent.get(run.pk) or ZERO))
        by_project[run.project_id] += left
        by_team[run.project.team_id] += left
    for budget in budgets:
        out[budget.pk] = by_project[budget.project_id] if budget.project_id else by_team[budget.team_id]
    return out


def budget_name(*, budget: Budget, period: Period) -> str:
    return f"{budget.scope_label} {period.label}"


@dataclass(frozen=True)
class BudgetLeft:
    """What a budget has left to admit new work against: its amount less this period's spend and
    what unfinished runs may still spend. The one reading of "left" for the API, the pages, the
    CLI, the forecast and admission: `remaining` never reads below zero; `overspent` says by how much."""

    amount: Decimal
    spent: Decimal
    reserved: Decimal

    @property
    def left(self) -> Decimal:
        """Signed: below zero when spend and reservations exceed the amount."""
        return self.amount - self.spent - self.reserved

    @property
    def remaining(self) -> Decimal:
        return max(ZERO, self.left)

    @property
    def overspent(self) -> Decimal:
        return max(ZERO, -self.left)

    @property
    def remaining_cents(self) -> Decimal:
        """`remaining` as shown: rounded down, so no surface offers a cent that is not there."""
        return costmodel.cents_down(self.remaining)

    @property
    def overspent_cents(self) -> Decimal:
        """`overspent` as shown: rounded up, so a budget over by less than half a cent still says so."""
        return costmodel.cents_up(self.overspent)

    def fits(self, cost: Decimal) -> bool:
        return cost <= self.left  # exact: the cents shown are never what admission compares

    @property
    def text(self) -> str:
        """'$1.20 left', or '$0.00 left (overspent by $0.59)': the same words on every surface."""
        over = self.overspent_cents
        return f"${self.remaining_cents:,.2f} left" + (f" (overspent by ${over:,.2f})" if over > 0 else "")


def budget_left(*, budget: Budget, period: Period, exclude_run_id: int | None = None) -> BudgetLeft:
    return BudgetLeft(amount=budget.amount, spent=budget_spent(budget=budget, period=period),
                      reserved=budget_reserved(budget=budget, exclude_run_id=exclude_run_id))


def budgets_left(*, budgets: Sequence[Budget], period: Period) -> dict[int, BudgetLeft]:
    """budget_left of each budget, by budget id, in a fixed number of queries."""
    spent = budgets_spent(budgets=budgets, period=period)
    reserved = budgets_reserved(budgets=budgets)
    return {b.pk: BudgetLeft(amount=b.amount, spent=spent[b.pk], reserved=reserved[b.pk]) for b in budgets}


def alerts_current(*, alerts: Iterable[BudgetAlert], amount: Decimal, spent: Decimal) -> list[BudgetAlert]:
    """The alerts still true at the budget's current amount: a threshold the spend is above."""
    if not amount:
        return list(alerts)
    percent = spent / amount * 100
    return [a for a in alerts if a.threshold <= percent]


@dataclass
class BudgetStatus:
    budget: Budget | None
    period: Period
    spent: Decimal
    reserved: Decimal
    forecast: Decimal
    burndown: list[tuple[str, Decimal]] = field(default_factory=list)  # (day ISO, cumulative spend)
    alerts: list[BudgetAlert] = field(default_factory=list)

    @property
    def amount(self) -> Decimal | None:
        return self.budget.amount if self.budget else None

    @property
    def left(self) -> BudgetLeft | None:
        """What is left to admit new work against (admission reads the same, apps.billing.services)."""
        return None if self.budget is None else BudgetLeft(amount=self.budget.amount, spent=self.spent, reserved=self.reserved)

    @property
    def remaining(self) -> Decimal | None:
        """Never below zero; `overspent` says by how much the budget is over."""
        return None if self.left is None else self.left.remaining

    @property
    def overspent(self) -> Decimal | None:
        return None if self.left is None else self.left.overspent

    @property
    def left_text(self) -> str:
        return "" if self.left is None else self.left.text

    @property
    def percent(self) -> float | None:
        if self.budget is None or not self.budget.amount:
            return None
        return float(self.spent / self.budget.amount * 100)

    @property
    def name(self) -> str:
        return budget_name(budget=self.budget, period=self.period) if self.budget else ""

    def as_dict(self) -> dict[str, Any]:
        cents = costmodel.to_cents
        budget = self.budget
        return {
            "period": {"key": self.period.key, "label": self.period.label, "start": self.period.start, "end": self.period.end},
            "budget": None
            if budget is None
            else {
                "id": budget.pk,
                "name": self.name,
                "scope": "project" if budget.project_id else "team",
                "amount": str(budget.amount),
                "thresholds": budget.thresholds,
                "action": budget.action,
            },
            "currency": "USD",
            "spent": str(cents(self.spent)),
            "reserved": str(cents(self.reserved)),
            "remaining": None if self.left is None else str(self.left.remaining_cents),
            "overspent": None if self.left is None else str(self.left.overspent_cents),
            "percent": None if self.percent is None else round(self.percent, 2),
            "forecast": str(cents(self.forecast)),
            "burndown": [{"date": day, "spent": str(cents(value))} for day, value in self.burndown],
            "alerts": [{"threshold": a.threshold, "at": a.created_at} for a in self.alerts],
        }


_PLACES = {name: int(cast(DecimalField, UsageEntry._meta.get_field(name)).decimal_places or 0)
           for name in ("cost", "device_seconds", "energy_kwh", "co2_g")}


def _ledger_sum(value: Decimal | None, name: str = "cost") -> Decimal:
    """A sum of a ledger column at the column's own precision. SQLite adds decimals as floats,
    which leaves noise past the last place (976.595752999999); every entry has at most that
    many places, so rounding back to them gives the exact sum PostgreSQL returns."""
    return ZERO if value is None else value.quantize(Decimal(1).scaleb(-_PLACES[name]))


class UtcDay(Func):
    """The UTC day of a timestamp as "YYYY-MM-DD" (costmodel.day_floor's day), worked out by the
    database so that sums per day can be grouped there. Django's TruncDay is a Python function
    called once per row on SQLite (most of a month's spend query); this is plain SQL on both."""

    output_field = CharField()

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> tuple[str, Any]:
        # Django stores aware datetimes in SQLite as UTC text, "YYYY-MM-DD HH:MM:SS[.ffffff]".
        return self.as_sql(compiler, connection, template="SUBSTR(%(expressions)s, 1, 10)", **extra)

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, template="TO_CHAR(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD')", **extra)


def _burndown(per_day: dict[str, Decimal], period: Period, now: datetime) -> list[tuple[str, Decimal]]:
    out, running = [], ZERO
    for day in costmodel.days_between(period.start, min(period.end, now + timedelta(seconds=1))):
        key = f"{day:%Y-%m-%d}"
        running += per_day.get(key, ZERO)
        out.append((key, running))
    return out


def _daily_cost(entries: QuerySet[UsageEntry], by: str) -> dict[Any, dict[str, Decimal]]:
    """Cost per `by` (a column) and UTC day, summed by the database: a month of a busy team's
    ledger is tens of thousands of entries, and reading them back to add them up in Python
    was most of the time of every page with a budget on it."""
    out: dict[Any, dict[str, Decimal]] = defaultdict(dict)
    rows = entries.order_by().values(by, day=UtcDay("period_start")).annotate(total=Sum("cost"))
    for key, day, total in rows.values_list(by, "day", "total"):
        out[key][day] = _ledger_sum(total)
    return out


def project_budget_status(*, project: Project, now: datetime | None = None) -> BudgetStatus:
    """Spend this period vs the project's budget (its own, else the team's), with burn-down."""
    return projects_budget_status(projects=[project], now=now)[project.pk]


def projects_budget_status(*, projects: Sequence[Project], now: datetime | None = None) -> dict[int, BudgetStatus]:
    """project_budget_status of each project, by project id, in a fixed number of queries
    however many projects there are (the finance console and /budgets/ show them all)."""
    now = now or timezone.now()
    period = period_for(at=now)
    if not projects:
        return {}
    found = budgets_for_projects(projects=projects)
    # Its own budget, else its team's (the first, in pk order).
    chosen = {pk: next((b for b in budgets if b.project_id), None) or next(iter(budgets), None) for pk, budgets in found.items()}
    in_period = UsageEntry.objects.filter(period_start__gte=period.start, period_start__lt=period.end)
    # A project without a budget, or with its own, is charged its own entries; one under its
    # team's budget shows the team's spend against it.
    by_team = {b.team_id for b in chosen.values() if b is not None and not b.project_id}
    by_project = {pk for pk, b in chosen.items() if b is None or b.project_id}
    project_days = _daily_cost(in_period.filter(project_id__in=by_project), "project_id") if by_project else {}
    team_days = _daily_cost(in_period.filter(team_id__in=by_team), "team_id") if by_team else {}
    in_use = list({b.pk: b for b in chosen.values() if b is not None}.values())
    reserved = budgets_reserved(budgets=in_use)
    alerts: dict[int, list[BudgetAlert]] = defaultdict(list)
    for alert in BudgetAlert.objects.filter(budget__in=in_use, period=period.key).order_by("threshold", "pk"):
        alerts[alert.budget_id].append(alert)
    out = {}
    for project in projects:
        budget = chosen[project.pk]
        per_day = team_days.get(budget.team_id, {}) if budget is not None and not budget.project_id else project_days.get(project.pk, {})
        spent = sum(per_day.values(), ZERO)
        out[project.pk] = BudgetStatus(
            budget=budget,
            period=period,
            spent=spent,
            reserved=reserved[budget.pk] if budget else ZERO,
            forecast=costmodel.linear_forecast(spent=spent, period_start=period.start, period_end=period.end, now=now),
            burndown=_burndown(per_day, period, now),
            alerts=alerts_current(alerts=alerts[budget.pk], amount=budget.amount, spent=spent) if budget else [],
        )
    return out


# --- finance reports ----------------------------------------------------------------------------

GROUPS = {
    "team": ("team_id", "team__slug"),
    "project": ("project_id", None),
    "pool": ("pool_id", "pool__name"),
    "template": ("template__slug", "template__slug"),
}


def ledger_filter(*, params: dict[str, str]) -> tuple[QuerySet[UsageEntry], dict[str, list[str]]]:
    """The ledger narrowed by query parameters; returns (queryset, field errors)."""
    errors: dict[str, list[str]] = {}
    # project__team: the ledger names a project as team/project; without it, one query per entry.
    qs = UsageEntry.objects.select_related("team", "project__team", "pool", "template").order_by("period_start", "id")
    for name, lookup in [("team", "team__slug"), ("pool", "pool__name"), ("template", "template__slug")]:
        if params.get(name):
            qs = qs.filter(**{lookup: params[name]})
    if params.get("project"):
        value = params["project"]
        if is_id(value):
            qs = qs.filter(project_id=int(value))
        elif "/" in value:
            team, slug = value.split("/", 1)
            qs = qs.filter(project__team__slug=team, project__slug=slug)
        else:
            errors["project"] = ["use a project id or team/project slug"]
    for name, lookup in [("run", "run_id"), ("attempt", "attempt_id")]:
        if params.get(name):
            if not is_id(params[name]):
                errors[name] = ["must be an integer id"]
            else:
                qs = qs.filter(**{lookup: int(params[name])})
    if params.get("kind"):
        if params["kind"] not in EntryKind.values:
            errors["kind"] = [f"one of {', '.join(EntryKind.values)}"]
        qs = qs.filter(kind=params["kind"])
    if params.get("period") and params["period"] != "all":
        period = period_parse(key=params["period"])
        if period is None:
            errors["period"] = ["use YYYY-MM or 'all'"]
        else:
            qs = qs.filter(period_start__gte=period.start, period_start__lt=period.end)
    for name, lookup in [("since", "period_start__gte"), ("until", "period_start__lt")]:
        if params.get(name):
            try:
                when = datetime.fromisoformat(params[name])
            except ValueError:
                errors[name] = ["use an ISO date or date-time, e.g. 2026-11-01"]
                continue
            try:
                when = datetime_utc(when, field=name, naive_tz=costmodel.EPOCH.tzinfo or UTC)
            except FieldError as exc:
                errors.update(exc.fields)
                continue
            qs = qs.filter(**{lookup: when})
    return qs, errors


_SPEND_SUMS = {"cost": Sum("cost"), "device_seconds": Sum("device_seconds"), "energy_kwh": Sum("energy_kwh"), "co2_g": Sum("co2_g")}


def _group_fields(group_by: str) -> list[str]:
    key_field, label_field = GROUPS[group_by]
    labels = ["project__team__slug", "project__slug"] if group_by == "project" else [label_field] if label_field else []
    return [key_field, *labels]


def spend_by(*, entries: QuerySet[UsageEntry], group_by: str) -> dict[str, Any]:
    """Totals and a daily series per group (for stacked charts)."""
    return spend_by_groups(entries=entries, groups=[group_by])[group_by]


def spend_by_groups(*, entries: QuerySet[UsageEntry], groups: Sequence[str]) -> dict[str, dict[str, Any]]:
    """spend_by for each of several groupings, from one pass of the database over the ledger:
    it sums per day and every combination of the groups' columns (a few rows per day: a
    project uses few pools and templates), and each grouping is folded from those rows."""
    fields = list(dict.fromkeys(f for group_by in groups for f in _group_fields(group_by)))
    rows = list(
        entries.order_by()
        .values(*fields, day=UtcDay("period_start"))
        .annotate(**{f"sum_{name}": agg for name, agg in _SPEND_SUMS.items()}, first=Min("period_start"), first_id=Min("id"))
    )
    return {group_by: _spend_fold(rows, group_by) for group_by in groups}


def _spend_fold(rows: list[dict[str, Any]], group_by: str) -> dict[str, Any]:
    key_field, label_field = GROUPS[group_by]
    labels: dict[Any, str] = {}
    first: dict[Any, tuple[datetime, int]] = {}
    totals: dict[Any, dict[str, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    series: dict[Any, dict[str, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for row in rows:
        key = row[key_field]
        if group_by == "project":
            labels[key] = f"{row['project__team__slug']}/{row['project__slug']}"
        else:
            labels[key] = str(row[label_field]) if label_field else str(key)
        first[key] = min(first.get(key, (row["first"], row["first_id"])), (row["first"], row["first_id"]))
        for name in _SPEND_SUMS:
            totals[key][name] += _ledger_sum(row[f"sum_{name}"], name)
        series[key][row["day"]] += _ledger_sum(row["sum_cost"])
    # Largest first; equal ones in the order the ledger first mentions them.
    ordered = sorted(totals, key=lambda k: (-totals[k]["cost"], first[k]))
    return {
        "group_by": group_by,
        "rows": [
            {
                "key": key,
                "label": labels[key],
                "cost": str(costmodel.to_cents(totals[key]["cost"])),
                "device_hours": round(float(totals[key]["device_seconds"]) / 3600, 3),
                "energy_kwh": round(float(totals[key]["energy_kwh"]), 6),
                "co2_g": round(float(totals[key]["co2_g"]), 3),
            }
            for key in ordered
        ],
        "series": [
            {"key": key, "label": labels[key], "points": [[day, float(cost)] for day, cost in sorted(series[key].items())]}
            for key in ordered
        ],
    }


def waste_by_outcome(*, entries: QuerySet[UsageEntry]) -> list[dict[str, Any]]:
    """Cost of the attempts that ended badly, by how they ended (their close entry's outcome),
    summed by the database: the ids of every failed attempt ever no longer go over as parameters."""
    wasted = UsageEntry.objects.filter(kind=EntryKind.CLOSE, outcome__in=WASTE_OUTCOMES)
    ended = wasted.filter(attempt_id=OuterRef("attempt_id")).order_by().values("outcome")[:1]
    rows = (
        entries.order_by()
        .filter(attempt_id__in=wasted.values("attempt_id"))
        .annotate(ended=Subquery(ended))
        .filter(ended__in=WASTE_OUTCOMES)
        .values("ended")
        .annotate(total=Sum("cost"))
        .values_list("ended", "total")
    )
    totals = {outcome: _ledger_sum(total) for outcome, total in rows}
    return [{"outcome": o, "cost": costmodel.to_cents(totals[o])} for o in WASTE_OUTCOMES if o in totals]


def family_costs(*, entries: QuerySet[UsageEntry]) -> list[dict[str, Any]]:
    """Cost per successful experiment: a family's whole cost divided by its successful runs.
    Summed and counted by the database per family and template (a run has one template)."""
    rows = (
        entries.order_by()
        .values("run__family", "template__slug")
        .annotate(total=Sum("cost"), runs=Count("run_id", distinct=True),
                  ok=Count("run_id", distinct=True, filter=Q(run__status=RunStatus.SUCCEEDED)), first=Min("period_start"))
    )
    cost: dict[str, Decimal] = defaultdict(lambda: ZERO)
    runs: dict[str, int] = defaultdict(int)
    succeeded: dict[str, int] = defaultdict(int)
    first: dict[str, datetime] = {}
    for row in rows:
        name = row["run__family"] or f"{row['template__slug']} (no family)"
        cost[name] += _ledger_sum(row["total"])
        runs[name] += row["runs"]
        succeeded[name] += row["ok"]
        first[name] = min(first.get(name, row["first"]), row["first"])
    out = []
    for name in sorted(cost, key=lambda n: (-cost[n], first[n])):
        ok = succeeded[name]
        out.append(
            {
                "family": name,
                "runs": runs[name],
                "succeeded": ok,
                "cost": costmodel.to_cents(cost[name]),
                "cost_per_success": costmodel.to_cents(cost[name] / ok) if ok else None,
            }
        )
    return out


def top_runs(*, entries: QuerySet[UsageEntry], limit: int = 10) -> list[dict[str, Any]]:
    rows = list(
        entries.values("run_id")
        .annotate(cost=Sum("cost"), energy=Sum("energy_kwh"), device_seconds=Sum("device_seconds"))
        .order_by("-cost")[:limit]
    )
    run_ids = [r["run_id"] for r in rows]
    runs = Run.objects.select_related("project__team", "template").in_bulk(run_ids)
    summaries = final_metrics(run_ids=run_ids)
    # Per step, the run's whole energy as its attempts recorded it (every device of the gang, in
    # joules): the period's ledger rounds energy to the milliwatt-hour and may hold only part of a run.
    joules = dict(Attempt.objects.filter(run_id__in=run_ids).values("run_id").annotate(j=Sum("energy_j")).values_list("run_id", "j"))
    out = []
    for row in rows:
        run = runs.get(row["run_id"])
        per_step = _wh_per_step(joules=float(joules.get(row["run_id"]) or 0.0), steps=run.steps_done if run else 0)
        out.append(
            {
                "run_id": row["run_id"],
                "run": run,
                "cost": costmodel.to_cents(row["cost"] or ZERO),
                "device_hours": round(float(row["device_seconds"] or 0) / 3600, 3),
                "energy_kwh": float(row["energy"] or 0),
                "wh_per_step": per_step,
                "wh_per_step_text": _significant(per_step),
                "energy_estimated": bool(run and run.energy_estimated),
                "final_metric": summaries.get(row["run_id"]),
            }
        )
    return out


def _wh_per_step(*, joules: float, steps: int) -> float | None:
    """Energy of all attempts over the steps done: a resumed run's repeated steps count once, their
    energy in full (as apps.tracking.energy_selectors). None without energy or steps, not 0."""
    return joules / 3600 / steps if joules > 0 and steps > 0 else None


def _significant(value: float | None, digits: int = 3) -> str:
    """Three significant figures in plain decimals (0.0000891, 10.0): rounding to places made
    every CPU run's figure 0.0 or 0.0001."""
    if value is None:
        return "–"
    places = max(0, digits - 1 - math.floor(math.log10(value)))
    return f"{value:,.{places}f}"


def final_metrics(*, run_ids: Iterable[int]) -> dict[int, str]:
    """'key=value' of each run's headline metric, from tracking's summaries when that app has
    them; empty when it does not (billing must not depend on tracking being there)."""
    try:
        summary = django_apps.get_model("tracking", "MetricSummary")
    except LookupError:
        return {}
    preferred = ["accuracy", "val_accuracy", "eval_accuracy", "val_loss", "eval_loss", "loss"]
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    for run_id, key, value in summary.objects.filter(run_id__in=list(run_ids), key__in=preferred).values_list(
        "run_id", "key", "last_value"
    ):
        found[run_id][key] = value
    out = {}
    for run_id, metrics in found.items():
        key = next(k for k in preferred if k in metrics)
        value = metrics[key]
        out[run_id] = f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
    return out


def energy_by_team(*, entries: QuerySet[UsageEntry]) -> list[dict[str, Any]]:
    rows = entries.values("team__slug").annotate(kwh=Sum("energy_kwh"), co2=Sum("co2_g"), cost=Sum("cost")).order_by("team__slug")
    return [
        {
            "team": r["team__slug"],
            "energy_kwh": float(r["kwh"] or 0),
            "co2_g": float(r["co2"] or 0),
            "cost": costmodel.to_cents(r["cost"] or ZERO),
        }
        for r in rows
    ]


def budget_list() -> QuerySet[Budget]:
    return Budget.objects.select_related("team", "project", "project__team").order_by("team__slug", "project__slug")


def quota_list() -> QuerySet[Quota]:
    return Quota.objects.select_related("team", "pool").order_by("team__slug", "pool__name")


def runs_visible_to(*, user: AnyUser, run_ids: Iterable[int]) -> set[int]:
    """Which of these runs the user may open. Finance sees every run's cost, but a run's page
    belongs to its team: offering a link the user cannot follow only leads to a 404."""
    ids = {int(i) for i in run_ids}
    if not ids:
        return set()
    return set(run_list(user=user).filter(pk__in=ids).values_list("pk", flat=True))


@dataclass(frozen=True)
class PoolCommitment:
    """Devices guaranteed to teams in a pool against the devices the pool has."""

    pool: str
    guaranteed: int
    devices: int

    @property
    def over(self) -> bool:
        return self.guaranteed > self.devices

    @property
    def note(self) -> str:
        return f"guarantees in {self.pool} total {plural(self.guaranteed, 'device')}; the pool has {self.devices}"


def pool_commitments(*, pool_ids: Iterable[int] | None = None) -> dict[int, PoolCommitment]:
    """Per pool: the sum of its quotas' guarantees and its registered devices. Guarantees may
    exceed the pool (it may grow; the scheduler honours them as devices free up, as in Kueue),
    so this is something to point out, not to refuse."""
    pools = NodePool.objects.all() if pool_ids is None else NodePool.objects.filter(pk__in=list(pool_ids))
    names = dict(pools.values_list("pk", "name"))
    guaranteed = dict(
        Quota.objects.filter(pool_id__in=names).values("pool_id").annotate(n=Sum("guaranteed_devices")).values_list("pool_id", "n")
    )
    devices = dict(
        Device.objects.filter(node__pool_id__in=names).values("node__pool_id").annotate(n=Count("pk")).values_list("node__pool_id", "n")
    )
    return {
        pk: PoolCommitment(pool=name, guaranteed=int(guaranteed.get(pk) or 0), devices=int(devices.get(pk) or 0))
        for pk, name in names.items()
    }
