"""Writes for money and limits: prices, ledger accrual, admission against budgets, alerts,
budgets and quotas. Every change to a budget or quota is audited; the ledger only grows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone

from apps.audit.services import audit_record, snapshot
from apps.billing import costmodel
from apps.billing.costmodel import ZERO, money
from apps.billing.models import (
    Budget,
    BudgetAction,
    BudgetAlert,
    EntryKind,
    PoolPrice,
    Quota,
    UsageEntry,
)
from apps.billing.selectors import (
    BudgetLeft,
    Period,
    budget_left,
    budget_name,
    budget_spent,
    budgets_for_project,
    period_for,
    pool_price_points,
    runs_predicted_cost,
)
from apps.billing.signals import budget_alert_notified
from apps.core.errors import FieldError, ServiceError
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.runs.services.runtime import MAX_RUNTIME_BASIS
from apps.tenants.models import Membership, Project, Role, Team
from apps.tenants.selectors import FINANCE_GROUP

log = logging.getLogger(__name__)

MAX_AMOUNT = Decimal("1000000000")
MAX_DEVICES = 100_000
KWH_PER_J = Decimal(1) / Decimal(3_600_000)
# Energy reported after an attempt closed is booked as a correction for this long.
LATE_ENERGY_WINDOW = timedelta(hours=1)


def _price_text(price: Decimal) -> str:
    text = f"{price:.4f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"${whole}.{frac.ljust(2, '0')}"


def _hours_text(seconds: int) -> str:
    hours = Decimal(seconds) / Decimal(3600)
    return f"{hours:.1f}" if (hours * 10) == (hours * 10).to_integral_value() else f"{hours:.2f}"


# --- prices -------------------------------------------------------------------------------------


def pool_price_set(*, pool: NodePool, price: Decimal, effective_from: datetime | None = None, allow_past: bool = False) -> PoolPrice:
    """A new dated price. It may not start in the past: time already charged stays charged."""
    now = timezone.now()
    effective_from = effective_from or now
    if price < 0 or price > MAX_AMOUNT:
        raise FieldError("price_per_device_hour", f"must be between 0 and {MAX_AMOUNT}")
    if not allow_past and effective_from < now - timedelta(seconds=5):
        raise FieldError("effective_from", "must not be in the past: a price change never rewrites what was charged")
    with transaction.atomic():
        before = pool.price_per_device_hour
        entry = PoolPrice.objects.create(pool=pool, price_per_device_hour=price, effective_from=effective_from)
        if effective_from <= now:
            NodePool.objects.filter(pk=pool.pk).update(price_per_device_hour=price)
        audit_record(action="pool.price_set", target=pool, before={"price": str(before)},
                     after={"price": str(price), "effective_from": effective_from.isoformat()})
    return entry


def pool_prices_in_force(*, now: datetime | None = None) -> list[NodePool]:
    """Bring each pool's shown price (NodePool.price_per_device_hour: the nodes page, the submit
    form's expected cost, the nodes API) up to the dated price now in force. A price set for a
    later date leaves the shown one as it was until then; the accrual beat calls this, so the
    change shows within a beat of taking effect, and the audit log says when it did."""
    now = now or timezone.now()
    in_force: dict[int, Decimal] = {}
    for pool_id, price in PoolPrice.objects.filter(effective_from__lte=now).order_by("pool_id", "effective_from", "pk").values_list(
            "pool_id", "price_per_device_hour"):
        in_force[pool_id] = price  # the last one per pool wins: the latest in force
    changed = []
    with transaction.atomic():
        for pool in NodePool.objects.select_for_update().filter(pk__in=in_force).order_by("pk"):
            if pool.price_per_device_hour != in_force[pool.pk]:
                before = pool.price_per_device_hour
                NodePool.objects.filter(pk=pool.pk).update(price_per_device_hour=in_force[pool.pk])
                audit_record(action="pool.price_in_force", target=pool, before={"price": str(before)},
                             after={"price": str(in_force[pool.pk])})
                changed.append(pool)
    return changed


# --- accrual ------------------------------------------------------------------------------------


def _attempt_devices(attempt: Attempt) -> int:
    devices = sum(len(a.devices or []) for a in attempt.assignments.all())
    return devices or int(attempt.run.nodes) * int(attempt.run.devices_per_node)


def _entry(attempt: Attempt, run: Run, pool: NodePool, **fields: Any) -> UsageEntry:
    return UsageEntry(
        attempt_id=attempt.pk,
        run_id=run.pk,
        project_id=run.project_id,
        team_id=run.project.team_id,
        pool_id=pool.pk,
        template_id=run.template_id,
        **fields,
    )


def _attempt_for_accrual(attempt_id: int) -> Attempt | None:
    """The started attempt, its row locked, with the run, project and pool its entries name."""
    return (
        Attempt.objects.select_for_update(of=("self",))
        .select_related("run", "run__project", "run__pool")
        .filter(pk=attempt_id, started_at__isnull=False)
        .first()
    )


def _ledger_state(attempt: Attempt) -> dict[str, Any]:
    """Where the attempt's ledger reaches (accrued_to), the energy it holds (kwh), and its close (closed)."""
    return UsageEntry.objects.filter(attempt_id=attempt.pk).aggregate(
        accrued_to=Max("period_end", filter=Q(kind__in=[EntryKind.ACCRUAL, EntryKind.CLOSE])),
        kwh=Sum("energy_kwh"),
        closed=Max("id", filter=Q(kind=EntryKind.CLOSE)),
    )


def _co2_g(kwh: Decimal, carbon_g_per_kwh: Decimal) -> Decimal:
    return (kwh * carbon_g_per_kwh).quantize(Decimal("0.001"))


def _late_energy_book(attempt: Attempt, *, kwh_delta: Decimal, now: datetime) -> int:
    """Energy that arrived after the close is booked as a correction, never edited in."""
    if kwh_delta <= 0:
        return 0
    run, pool = attempt.run, attempt.run.pool
    _entry(attempt, run, pool, kind=EntryKind.CORRECTION, period_start=attempt.ended_at or now,
           period_end=attempt.ended_at or now, energy_kwh=kwh_delta, co2_g=_co2_g(kwh_delta, pool.carbon_g_per_kwh),
           note="energy reported after close").save()
    return 1


def _accrual_entries(attempt: Attempt, *, started_at: datetime, accrued_to: datetime | None, now: datetime) -> list[UsageEntry]:
    """The unsaved entries that bring the ledger from ``accrued_to`` up to ``now`` (or the end, closing it)."""
    run, pool = attempt.run, attempt.run.pool
    plan = costmodel.accrual_plan(
        prices=pool_price_points(pool=pool),
        devices=_attempt_devices(attempt),
        started_at=started_at,
        ended_at=attempt.ended_at,
        accrued_to=accrued_to,
        now=now,
    )
    entries = [
        _entry(attempt, run, pool, kind=EntryKind.ACCRUAL, period_start=s.start, period_end=s.end, devices=s.devices,
               device_seconds=s.device_seconds, price_per_device_hour=s.price, cost=s.cost)
        for s in plan.segments
    ]
    entries += [
        _entry(attempt, run, pool, kind=EntryKind.CORRECTION, period_start=s.start, period_end=s.end, devices=s.devices,
               device_seconds=s.device_seconds, price_per_device_hour=s.price, cost=s.cost,
               note="refund: charged past the attempt's reported end")
        for s in plan.refunds
    ]
    if plan.closes:
        entries.append(
            _entry(attempt, run, pool, kind=EntryKind.CLOSE, period_start=plan.accrued_to, period_end=plan.accrued_to,
                   devices=plan.segments[-1].devices if plan.segments else 0, outcome=attempt.status)
        )
    return entries


def attempt_accrue(*, attempt_id: int, now: datetime) -> int:
    """Bring one attempt's ledger up to ``now`` (or its end, then close it). Returns entries added.

    The attempt row is locked so two workers accruing at once queue instead of double-charging;
    the ledger's unique constraints are the backstop where locks are no-ops (SQLite).
    """
    try:
        with transaction.atomic():
            attempt = _attempt_for_accrual(attempt_id)
            if attempt is None or attempt.started_at is None:
                return 0
            state = _ledger_state(attempt)
            kwh_now = (Decimal(str(attempt.energy_j)) * KWH_PER_J).quantize(costmodel.COST_QUANTUM)
            kwh_delta = kwh_now - (state["kwh"] or ZERO)
            if state["closed"]:
                return _late_energy_book(attempt, kwh_delta=kwh_delta, now=now)
            entries = _accrual_entries(attempt, started_at=attempt.started_at, accrued_to=state["accrued_to"], now=now)
            if entries and kwh_delta > 0:
                entries[-1].energy_kwh = kwh_delta
                entries[-1].co2_g = _co2_g(kwh_delta, attempt.run.pool.carbon_g_per_kwh)
            for entry in entries:
                entry.save()
            return len(entries)
    except IntegrityError:
        log.info("attempt %s: another worker accrued it first", attempt_id)
        return 0


def accrual_run(*, now: datetime | None = None) -> int:
    """Accrue every started, unclosed attempt up to now; close the ended ones. Idempotent."""
    now = now or timezone.now()
    closed = UsageEntry.objects.filter(kind=EntryKind.CLOSE).values_list("attempt_id", flat=True)
    open_ids = list(Attempt.objects.filter(started_at__isnull=False).exclude(pk__in=closed).values_list("pk", flat=True))
    late_energy = list(
        UsageEntry.objects.filter(kind=EntryKind.CLOSE, created_at__gte=now - LATE_ENERGY_WINDOW).values_list("attempt_id", flat=True)
    )
    added = 0
    for attempt_id in sorted({*open_ids, *late_energy}):
        added += attempt_accrue(attempt_id=attempt_id, now=now)
    return added


# --- admission ----------------------------------------------------------------------------------


def _cost_word(basis: str) -> str:
    # A max runtime is a ceiling; a prediction is only about right.
    return "up to" if basis == MAX_RUNTIME_BASIS else "about"


def budget_admission_check(*, run: Run, project: Project, user: Any = None, **_: Any) -> None:
    """Refuse a run whose predicted cost (predicted runtime × devices × price; the max runtime
    without history to predict from) does not fit what its budgets have left.

    Called inside the submit transaction. The budget rows are locked (pk order) until that
    transaction commits, so a concurrent submission waits, then sees this run among the
    unfinished ones and counts its reservation: budgets cannot be overspent by racing.
    """
    if not run.pool_id:
        return
    ids = [b.pk for b in budgets_for_project(project=project)]
    if not ids:
        return
    locked = Budget.objects.select_for_update(of=("self",)).filter(pk__in=ids).order_by("pk")
    budgets = list(locked.select_related("team", "project", "project__team"))
    period = period_for(at=timezone.now())
    lefts = [(budget, budget_left(budget=budget, period=period, exclude_run_id=run.pk)) for budget in budgets]
    names = [run.pool.name, *(p for p in (run.pools or []) if p != run.pool.name)] if len(run.pools or []) > 1 else []
    if not names:
        refusal = _budget_refusal(run=run, lefts=lefts, period=period)
        if refusal is not None:
            raise refusal
        return
    _budget_pools_narrow(run=run, names=names, lefts=lefts, period=period)


def _budget_refusal(*, run: Run, lefts: list[tuple[Budget, BudgetLeft]], period: Period) -> ServiceError | None:
    """The refusal for the first budget the run's predicted cost in its pool does not fit; None if all fit."""
    forecast = runs_predicted_cost(runs=[run])[0]
    predicted = forecast.cost
    for budget, left in lefts:
        if not left.fits(predicted):
            held = f" ({money(left.reserved)} held by unfinished runs)" if left.reserved > 0 else ""
            return ServiceError(
                f"Budget '{budget_name(budget=budget, period=period)}' has {left.text} of "
                f"{money(budget.amount)}{held}; this run would cost {_cost_word(forecast.basis)} ${costmodel.cents_up(predicted):,.2f} "
                f"({forecast.devices} device{'s' if forecast.devices != 1 else ''} × "
                f"{_hours_text(int(round(forecast.runtime_s)))} h, {forecast.basis}, × {_price_text(forecast.price)}/device-hour"
                f"{' in pool ' + run.pool.name if run.pools else ''}).",
                code="budget_exceeded",
            )
    return None


def _budget_pools_narrow(*, run: Run, names: list[str], lefts: list[tuple[Budget, BudgetLeft]], period: Period) -> None:
    """A run that may use several pools is admitted if it fits its budgets in one of them: its
    acceptable pools narrow to those it fits in (each at its own price), so wherever the scheduler
    places it the budgets hold; refused only when it fits in none."""
    pools = {p.name: p for p in NodePool.objects.filter(name__in=names)}
    default = run.pool
    fitting: list[str] = []
    refusals: dict[str, ServiceError] = {}
    for name in (n for n in names if n in pools):
        run.pool = pools[name]
        refusal = _budget_refusal(run=run, lefts=lefts, period=period)
        if refusal is None:
            fitting.append(name)
        else:
            refusals[name] = refusal
    if not fitting:
        run.pool = default
        first = refusals.get(default.name) or next(iter(refusals.values()))
        raise ServiceError(f"{first.message} It fits the budget in none of its acceptable pools ({', '.join(names)}).",
                           code="budget_exceeded")
    run.pool = default if default.name in fitting else pools[fitting[0]]
    run.pools = fitting
    if refusals:
        run.pool_reason = (f"{', '.join(refusals)} left out: the run's predicted cost there does not fit its budget "
                           f"({refusals[next(iter(refusals))].message})")


# --- budgets, quotas ------------------------------------------------------------------

BUDGET_FIELDS = ["amount", "thresholds", "action", "period"]


def _clean_amount(value: Any) -> Decimal:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError) as exc:
        raise FieldError("amount", "must be a number") from exc
    if not amount.is_finite() or amount < 0 or amount > MAX_AMOUNT:
        raise FieldError("amount", f"must be between 0 and {MAX_AMOUNT:,}")
    if amount != amount.quantize(costmodel.CENT):
        # Rounding it would move the limit: 10.015 stored as 10.02 lets spend past what was set.
        raise FieldError("amount", f"must have at most 2 decimal places (got {value})")
    return amount.quantize(costmodel.CENT)


def _clean_thresholds(value: Any) -> list[int]:
    if isinstance(value, str):
        value = [v for v in value.replace(" ", "").split(",") if v]
    if not isinstance(value, list) or not 1 <= len(value) <= 10:
        raise FieldError("thresholds", "give 1 to 10 percentages, e.g. [50, 80, 100]")
    try:
        out = sorted({int(v) for v in value})
    except (TypeError, ValueError) as exc:
        raise FieldError("thresholds", "percentages must be whole numbers") from exc
    if out[0] < 1 or out[-1] > 1000:
        raise FieldError("thresholds", "each percentage must be between 1 and 1000")
    return out


def _clean_action(value: Any) -> str:
    if value not in BudgetAction.values:
        raise FieldError("action", f"one of {', '.join(BudgetAction.values)}")
    return str(value)


def budget_create(
    *, team: Team, project: Project | None, amount: Any, thresholds: Any = None, action: str = BudgetAction.BLOCK_NEW
) -> Budget:
    if project is not None and project.team_id != team.pk:
        raise FieldError("project", "belongs to another team")
    duplicate = FieldError("project" if project else "team", "already has a budget; edit it instead")
    exists = Budget.objects.filter(project=project) if project else Budget.objects.filter(team=team, project__isnull=True)
    if exists.exists():
        raise duplicate
    values = {
        "amount": _clean_amount(amount),
        "thresholds": _clean_thresholds(thresholds if thresholds is not None else [50, 80, 100]),
        "action": _clean_action(action),
    }
    try:
        with transaction.atomic():
            budget = Budget.objects.create(team=team, project=project, **values)
            audit_record(action="budget.create", target=budget, team_id=team.pk, after=snapshot(budget, BUDGET_FIELDS))
    except IntegrityError as exc:
        # Two people adding the same budget at once: the unique constraint decides, and the
        # loser gets the same answer as if it had come second.
        raise duplicate from exc
    return budget


def budget_update(*, budget: Budget, **changes: Any) -> Budget:
    cleaners = {"amount": _clean_amount, "thresholds": _clean_thresholds, "action": _clean_action}
    unknown = set(changes) - set(cleaners)
    if unknown:
        raise FieldError(sorted(unknown)[0], "cannot be changed")
    with transaction.atomic():
        locked = Budget.objects.select_for_update().get(pk=budget.pk)
        before = snapshot(locked, BUDGET_FIELDS)
        old_amount = locked.amount
        for name, value in changes.items():
            setattr(locked, name, cleaners[name](value))
        locked.save()
        audit_record(action="budget.update", target=locked, team_id=locked.team_id, before=before,
                     after=snapshot(locked, BUDGET_FIELDS))
        if locked.amount > old_amount:
            _alerts_rearm(budget=locked)
    return locked


QUOTA_FIELDS = ["guaranteed_devices", "borrow_limit"]


def _clean_devices(name: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise FieldError(name, "must be a whole number") from exc
    if not 0 <= number <= MAX_DEVICES:
        raise FieldError(name, f"must be between 0 and {MAX_DEVICES:,}")
    return number


def quota_create(*, team: Team, pool: NodePool, guaranteed_devices: Any, borrow_limit: Any) -> Quota:
    """A new quota for a team in a pool. A second one for the same pair is refused, as budgets
    are: an "Add" that replaced the existing quota silently lost the figures set before.

    A guarantee larger than the pool is accepted (pools grow, and guarantees may be
    over-committed, as in Kueue); `pool_commitments` tells callers so they can say it.
    """
    duplicate = FieldError("pool", f"{team.slug} already has a quota in {pool.name}; edit it instead")
    if Quota.objects.filter(team=team, pool=pool).exists():
        raise duplicate
    values = {name: _clean_devices(name, value) for name, value in
              (("guaranteed_devices", guaranteed_devices), ("borrow_limit", borrow_limit))}
    try:
        with transaction.atomic():
            quota = Quota.objects.create(team=team, pool=pool, **values)
            audit_record(action="quota.create", target=quota, team_id=team.pk, after=snapshot(quota, QUOTA_FIELDS))
    except IntegrityError as exc:
        raise duplicate from exc  # created by someone else since the check above
    return quota


def quota_set(*, team: Team, pool: NodePool, guaranteed_devices: Any, borrow_limit: Any) -> Quota:
    """Create or replace a team's quota in a pool (seeding, scripts, edits of a known quota).
    People adding a quota go through `quota_create`, which refuses to replace one."""
    with transaction.atomic():
        quota, created = Quota.objects.select_for_update().get_or_create(team=team, pool=pool)
        before = None if created else snapshot(quota, QUOTA_FIELDS)
        quota.guaranteed_devices = _clean_devices("guaranteed_devices", guaranteed_devices)
        quota.borrow_limit = _clean_devices("borrow_limit", borrow_limit)
        quota.save()
        audit_record(action="quota.create" if created else "quota.update", target=quota, team_id=team.pk, before=before,
                     after=snapshot(quota, QUOTA_FIELDS))
    return quota


def quota_update(*, quota: Quota, **changes: Any) -> Quota:
    unknown = set(changes) - set(QUOTA_FIELDS)
    if unknown:
        raise FieldError(sorted(unknown)[0], "cannot be changed")
    return quota_set(
        team=quota.team,
        pool=quota.pool,
        guaranteed_devices=changes.get("guaranteed_devices", quota.guaranteed_devices),
        borrow_limit=changes.get("borrow_limit", quota.borrow_limit),
    )


# --- alerts -------------------------------------------------------------------------------------


def budget_alerts_check(
    *,
    now: datetime | None = None,
    notify: Callable[[int], None] | None = None,
    stop_running: Callable[[int], None] | None = None,
) -> list[BudgetAlert]:
    """Record each threshold crossed this period once; after commit, ``notify(alert_id)`` (the
    task module queues e-mail and webhooks) for the highest one a check crossed (several crossed
    at once are one message, naming the highest) and, at 100% of a stop_running budget,
    ``stop_running(budget_id)``.

    A new period has no alerts yet, so thresholds re-arm by themselves at roll-over; a raised
    amount re-arms those above the new usage (budget_update).
    """
    now = now or timezone.now()
    period = period_for(at=now)
    fired: list[BudgetAlert] = []
    for budget in Budget.objects.select_related("team", "project", "project__team").order_by("pk"):
        if not budget.amount:
            continue
        crossed = _alerts_record(budget=budget, period=period, spent=budget_spent(budget=budget, period=period))
        fired += crossed
        if not crossed:
            continue
        highest = crossed[-1]
        if notify is not None:
            transaction.on_commit(partial(notify, highest.pk))
        if highest.threshold >= 100 and budget.action == BudgetAction.STOP_RUNNING and stop_running is not None:
            transaction.on_commit(partial(stop_running, budget.pk))
    return fired


def _alerts_record(*, budget: Budget, period: Period, spent: Decimal) -> list[BudgetAlert]:
    """The budget's thresholds newly crossed this period, recorded and audited, lowest first."""
    percent = spent / budget.amount * 100
    done = set(BudgetAlert.objects.filter(budget=budget, period=period.key).values_list("threshold", flat=True))
    out = []
    for threshold in sorted(int(t) for t in budget.thresholds):
        if percent < threshold or threshold in done:
            continue
        try:
            with transaction.atomic():
                alert = BudgetAlert.objects.create(budget=budget, period=period.key, threshold=threshold, spent=spent,
                                                   amount=budget.amount)
                audit_record(action="budget.alert", target=budget, team_id=budget.team_id,
                             after={"period": period.key, "threshold": threshold, "spent": str(costmodel.to_cents(spent))})
        except IntegrityError:
            continue  # another worker recorded it
        out.append(alert)
    return out


def _alerts_rearm(*, budget: Budget) -> list[int]:
    """After the amount changed: this period's alerts for thresholds the spend is now below are
    cleared (audited), so they fire again when crossed at the new amount."""
    period = period_for(at=timezone.now())
    spent = budget_spent(budget=budget, period=period)
    percent = spent / budget.amount * 100 if budget.amount else None
    alerts = BudgetAlert.objects.filter(budget=budget, period=period.key)
    stale = sorted(t for t in alerts.values_list("threshold", flat=True) if percent is not None and t > percent)
    if stale:
        alerts.filter(threshold__in=stale).delete()
        audit_record(action="budget.alerts_rearm", target=budget, team_id=budget.team_id,
                     before={"period": period.key, "thresholds": stale},
                     after={"amount": str(budget.amount), "spent": str(costmodel.to_cents(spent))})
    return stale


def alert_recipients(*, budget: Budget) -> list[str]:
    User = get_user_model()
    admins = Membership.objects.filter(team_id=budget.team_id, role=Role.ADMIN).values_list("user__email", flat=True)
    finance = User.objects.filter(groups__name=FINANCE_GROUP, is_active=True).values_list("email", flat=True)
    return sorted({e for e in [*admins, *finance] if e})


def alert_message(*, alert: BudgetAlert) -> tuple[str, str]:
    budget = alert.budget
    period = period_for(at=datetime.strptime(alert.period, "%Y-%m").replace(tzinfo=costmodel.EPOCH.tzinfo))
    name = budget_name(budget=budget, period=period)
    subject = f"[Trainyard] Budget '{name}' reached {alert.threshold}%"
    body = (
        f"Budget '{name}' has spent {money(alert.spent)} of {money(alert.amount)} "
        f"({float(alert.spent / alert.amount * 100):.1f}%), crossing the {alert.threshold}% threshold.\n"
    )
    if alert.threshold >= 100:
        body += "New runs that would exceed it are refused" + (
            "; running ones are being stopped.\n" if budget.action == BudgetAction.STOP_RUNNING else ".\n"
        )
    return subject, body


def alert_email(*, alert_id: int) -> bool:
    """Send the alert's e-mail at most once (claimed by a conditional update)."""
    if not BudgetAlert.objects.filter(pk=alert_id, emailed_at__isnull=True).update(emailed_at=timezone.now()):
        return False
    alert = BudgetAlert.objects.select_related("budget__team", "budget__project__team").get(pk=alert_id)
    recipients = alert_recipients(budget=alert.budget)
    if recipients:
        subject, body = alert_message(alert=alert)
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
    return True


def alert_payload(*, alert: BudgetAlert) -> dict[str, Any]:
    """What a notified alert says to machines (the team's webhooks): the budget, the threshold, the spend."""
    budget = alert.budget
    period = period_for(at=datetime.strptime(alert.period, "%Y-%m").replace(tzinfo=costmodel.EPOCH.tzinfo))
    return {
        "alert_id": alert.pk,
        "budget": {"id": budget.pk, "name": budget_name(budget=budget, period=period), "amount": str(alert.amount)},
        "team": budget.team.slug,
        "project": budget.project.full_slug if budget.project else None,
        "period": alert.period,
        "threshold": alert.threshold,
        "spent": str(costmodel.to_cents(alert.spent)),
        "at": alert.created_at.isoformat(),
    }


def alert_announce(*, alert_id: int) -> None:
    """Tell the apps above billing (webhooks) that an alert was notified; each delivers it once."""
    alert = BudgetAlert.objects.select_related("budget__team", "budget__project__team").get(pk=alert_id)
    with transaction.atomic():
        budget_alert_notified.send(sender=BudgetAlert, alert=alert, payload=alert_payload(alert=alert))


def budget_stop_running(*, budget_id: int, cancel: Any = None) -> list[int]:
    """For a stop_running budget at 100%: ask every active run in its scope to stop.

    ``cancel`` is the runs app's ``run_cancel(*, run, user)`` (passed in by the task); runs
    that finished meanwhile are skipped.
    """
    budget = Budget.objects.get(pk=budget_id)
    runs = Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.SCHEDULED, RunStatus.RUNNING], tracked_only=False)
    runs = runs.filter(project_id=budget.project_id) if budget.project_id else runs.filter(project__team_id=budget.team_id)
    stopped: list[int] = []
    if cancel is None:
        return stopped
    for run in runs:
        try:
            cancel(run=run, user=None)
        except ServiceError as err:
            log.info("budget %s: run %s not stopped: %s", budget_id, run.pk, err.message)
            continue
        stopped.append(run.pk)
    return stopped
