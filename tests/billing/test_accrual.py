"""Accrual details: running attempts, refunds for time charged past a late-reported end,
late energy, the task entry point, and idempotent demo seeding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

from django.db.models import Sum

from apps.audit.models import AuditEvent
from apps.billing import tasks
from apps.billing.models import Budget, EntryKind, PoolPrice, Quota, UsageEntry
from apps.billing.seed import seed_billing
from apps.billing.services import accrual_run, pool_price_set, pool_prices_in_force
from apps.core.errors import FieldError
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, AttemptStatus
from tests.billing.helpers import make_attempt, make_pool, make_run

T = datetime(2026, 11, 10, tzinfo=UTC)


def _cost(**filters: Any) -> Decimal:
    return UsageEntry.objects.filter(**filters).aggregate(s=Sum("cost"))["s"] or Decimal(0)


def test_running_then_lost_late_is_refunded(cast: Any) -> None:
    pool = make_pool(prices=[(T - timedelta(days=1), "2.00")])
    run = make_run(cast.digits, pool)
    attempt = make_attempt(run, started_at=T, devices=[0, 1, 2], energy_j=1_800_000)
    accrual_run(now=T + timedelta(hours=1))
    assert _cost() == Decimal("6")  # 3 devices x 1 h x $2
    accrual_run(now=T + timedelta(hours=2))
    assert _cost() == Decimal("12")
    # The node went silent at 1.5 h; the sweep reports the attempt lost with that end time.
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=T + timedelta(hours=1, minutes=30), status=AttemptStatus.LOST,
                                                 energy_j=3_600_000)
    accrual_run(now=T + timedelta(hours=3))
    assert _cost() == Decimal("9")
    assert _cost(kind=EntryKind.CORRECTION) == Decimal("-3")
    close = UsageEntry.objects.get(kind=EntryKind.CLOSE)
    assert close.outcome == "lost"
    assert UsageEntry.objects.aggregate(s=Sum("energy_kwh"))["s"] == Decimal("1")
    # Energy that arrives after the close is a correction entry; the rest stays as written.
    Attempt.objects.filter(pk=attempt.pk).update(energy_j=5_400_000)
    before = list(UsageEntry.objects.values_list("pk", "cost", "energy_kwh"))
    accrual_run(now=T + timedelta(hours=3, minutes=1))
    assert UsageEntry.objects.aggregate(s=Sum("energy_kwh"))["s"] == Decimal("1.5")
    assert list(UsageEntry.objects.filter(pk__in=[b[0] for b in before]).values_list("pk", "cost", "energy_kwh")) == before
    assert accrual_run(now=T + timedelta(hours=3, minutes=2)) == 0


def test_price_change_never_rewrites_the_past(cast: Any) -> None:
    pool = make_pool(prices=[(T - timedelta(days=1), "1.00")])
    make_attempt(make_run(cast.digits, pool), started_at=T - timedelta(hours=2), ended_at=T - timedelta(hours=1))
    accrual_run(now=T)
    try:
        pool_price_set(pool=pool, price=Decimal("5"), effective_from=T - timedelta(days=30))
    except FieldError as err:
        assert "effective_from" in err.fields
    else:
        raise AssertionError("a price starting in the past was accepted")
    entry = pool_price_set(pool=pool, price=Decimal("5"))
    assert entry.effective_from > T
    accrual_run()
    assert _cost() == Decimal("1")


# The task runs on the real clock and budgets count this month only. A dollar a second makes the
# last seconds before the task runs cross every threshold of a $1 budget, so the tests also hold
# when the suite runs in the first hours of a month (an hour at $1/h did not, then).
PER_SECOND = "3600.00"


def test_accrue_task_runs_alerts_too(cast: Any, django_capture_on_commit_callbacks: Any) -> None:
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), PER_SECOND)])
    now = datetime.now(UTC)
    make_attempt(make_run(cast.digits, pool), started_at=now - timedelta(hours=1), devices=[0])
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("1.00"))
    with django_capture_on_commit_callbacks(execute=True):
        tasks.accrue.apply(throw=True)
    assert _cost() > Decimal("3599")
    assert Budget.objects.get().alerts.count() == 3


def test_seeding_is_idempotent(cast: Any) -> None:
    make_pool("local", list_price="0.50")
    for _ in range(2):
        seed_billing(users={}, teams={"vision": cast.vision, "nlp": cast.nlp}, stdout=StringIO())
    assert PoolPrice.objects.count() == 1 and Budget.objects.count() == 2 and Quota.objects.count() == 2


def test_stop_running_budget_cancels_active_runs(cast: Any, django_capture_on_commit_callbacks: Any) -> None:
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), PER_SECOND)])
    now = datetime.now(UTC)
    spent = make_run(cast.digits, pool, status="succeeded")
    make_attempt(spent, started_at=now - timedelta(hours=2), ended_at=now - timedelta(seconds=5))
    waiting = make_run(cast.digits, pool, status="queued")
    other_team = make_run(cast.tinylm, pool, status="queued")
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("1.00"), action="stop_running", thresholds=[100])
    with django_capture_on_commit_callbacks(execute=True):
        tasks.accrue.apply(throw=True)
    waiting.refresh_from_db()
    other_team.refresh_from_db()
    assert waiting.status == "cancelled" and other_team.status == "queued"


def test_a_dated_price_shows_once_it_is_in_force(cast: Any, django_capture_on_commit_callbacks: Any) -> None:
    """The pool's shown price (nodes page, submit form, nodes API) follows the dated prices: a
    price set for later changes nothing now, and the accrual beat after its date shows it."""
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    NodePool.objects.filter(pk=pool.pk).update(price_per_device_hour=Decimal("1.00"))
    later = datetime.now(UTC) + timedelta(days=2)
    pool_price_set(pool=pool, price=Decimal("2.50"), effective_from=later)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.accrue.apply(throw=True)
    assert NodePool.objects.get(pk=pool.pk).price_per_device_hour == Decimal("1.00")
    assert pool_prices_in_force(now=later - timedelta(seconds=1)) == []
    assert [p.pk for p in pool_prices_in_force(now=later)] == [pool.pk]
    assert NodePool.objects.get(pk=pool.pk).price_per_device_hour == Decimal("2.50")
    event = AuditEvent.objects.filter(action="pool.price_in_force").get()
    assert (event.before, event.after) == ({"price": "1.0000"}, {"price": "2.5000"})
    assert pool_prices_in_force(now=later + timedelta(hours=1)) == []  # once: nothing more to change
