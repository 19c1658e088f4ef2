"""Property tests of the pure cost model and of ledger accrual on real rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from apps.billing import costmodel
from apps.billing.costmodel import PricePoint
from apps.billing.models import EntryKind, UsageEntry
from apps.billing.services import accrual_run
from apps.runs.models import Attempt
from tests.billing.helpers import make_attempt, make_pool, make_run

T0 = datetime(2026, 10, 20, tzinfo=UTC)  # crosses the Oct/Nov period boundary inside the window
HORIZON_S = 30 * 86400
CENT = Decimal("0.01")

prices_st = st.lists(
    st.tuples(st.integers(0, HORIZON_S), st.decimals(min_value=Decimal("0"), max_value=Decimal("40"), places=4)),
    min_size=1, max_size=5, unique_by=lambda p: p[0],
)
attempt_st = st.tuples(st.integers(0, HORIZON_S - 1), st.integers(1, 5 * 86400), st.integers(0, 8))


def _points(raw: list[tuple[int, Decimal]]) -> list[PricePoint]:
    return [PricePoint(T0 + timedelta(seconds=s), p) for s, p in raw]


def test_price_in_force_and_split() -> None:
    prices = [PricePoint(T0, Decimal("1")), PricePoint(T0 + timedelta(hours=2), Decimal("3"))]
    assert costmodel.price_in_force(prices, T0 - timedelta(seconds=1)) == 0
    assert costmodel.price_in_force(prices, T0 + timedelta(hours=2)) == 3
    segs = costmodel.split_interval(prices, T0 + timedelta(hours=1), T0 + timedelta(hours=3), devices=2)
    assert [s.cost for s in segs] == [Decimal("2.000000"), Decimal("6.000000")]
    # A period boundary cuts too: October's part stays in October.
    segs = costmodel.split_interval(prices, datetime(2026, 10, 31, 23, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC), devices=1)
    assert [s.end for s in segs][0] == datetime(2026, 11, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(prices=prices_st, attempt=attempt_st, cuts=st.lists(st.integers(0, HORIZON_S + 6 * 86400), max_size=6))
def test_pure_accrual_in_pieces_equals_one_shot(prices: list[tuple[int, Decimal]], attempt: tuple[int, int, int],
                                                 cuts: list[int]) -> None:
    points = _points(prices)
    start = T0 + timedelta(seconds=attempt[0])
    end = start + timedelta(seconds=attempt[1], microseconds=123457)
    devices = attempt[2]
    accrued_to: datetime | None = None
    total = Decimal(0)
    for cut in sorted(cuts):
        now = T0 + timedelta(seconds=cut)
        ended = end if now >= end else None  # the attempt's end is known once it has happened
        plan = costmodel.accrual_plan(prices=points, devices=devices, started_at=start, ended_at=ended, accrued_to=accrued_to, now=now)
        total += sum((s.cost for s in plan.segments), Decimal(0))
        accrued_to = plan.accrued_to if plan.segments or accrued_to else accrued_to
    final = costmodel.accrual_plan(prices=points, devices=devices, started_at=start, ended_at=end, accrued_to=accrued_to,
                                   now=end + timedelta(days=1))
    total += sum((s.cost for s in final.segments), Decimal(0))
    assert final.closes
    assert abs(total - costmodel.one_shot_cost(points, start, end, devices)) <= CENT
    again = costmodel.accrual_plan(prices=points, devices=devices, started_at=start, ended_at=end, accrued_to=final.accrued_to,
                                   now=end + timedelta(days=2))
    assert again.segments == [] and again.refunds == []


def _ledger_cost(pool: Any) -> Decimal:
    return UsageEntry.objects.filter(pool=pool).aggregate(s=Sum("cost"))["s"] or Decimal(0)


@pytest.mark.django_db
# Real rows are slow to shrink; a failure prints its example, which is enough to reproduce it.
@settings(max_examples=25, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prices=prices_st, attempts=st.lists(st.tuples(st.integers(0, HORIZON_S - 1), st.integers(1, 5 * 86400), st.integers(1, 8)),
                                           min_size=1, max_size=4),
       cuts=st.lists(st.integers(0, HORIZON_S), min_size=1, max_size=4))
def test_ledger_matches_price_in_force(cast: Any, prices: list[tuple[int, Decimal]], attempts: list[tuple[int, int, int]],
                                       cuts: list[int]) -> None:
    """Any attempts, any price changes: the ledger = Σ device-seconds x price in force (±1 cent);
    accruing again adds nothing; several intermediate accruals then close = one shot."""
    # Each example in its own savepoint, rolled back, so examples cannot see each other's rows.
    with transaction.atomic():
        _ledger_example(cast, prices, attempts, cuts)
        transaction.set_rollback(True)


def _ledger_example(cast: Any, prices: list[tuple[int, Decimal]], attempts: list[tuple[int, int, int]], cuts: list[int]) -> None:
    points = _points(prices)
    pools = [make_pool(prices=[(p.effective_from, str(p.price)) for p in points]) for _ in range(2)]
    last_end = T0
    for pool in pools:
        run = make_run(cast.digits, pool)
        for offset, length, devices in attempts:
            start = T0 + timedelta(seconds=offset)
            end = start + timedelta(seconds=length)
            make_attempt(run, started_at=start, ended_at=end, devices=list(range(devices)))
            last_end = max(last_end, end)
    piecewise, one_shot = pools

    # Piecewise: accrue at intermediate "now"s, with each attempt's end hidden until it happened.
    for cut in sorted(cuts):
        now = T0 + timedelta(seconds=cut)
        hidden = list(Attempt.objects.filter(run__pool=piecewise, ended_at__gt=now).values_list("pk", "ended_at"))
        Attempt.objects.filter(pk__in=[h[0] for h in hidden]).update(ended_at=None)
        accrual_run(now=now)
        for pk, ended_at in hidden:
            Attempt.objects.filter(pk=pk).update(ended_at=ended_at)
    final_now = last_end + timedelta(hours=1)
    accrual_run(now=final_now)

    expected = sum(
        (costmodel.one_shot_cost(points, a.started_at, a.ended_at, len(a.assignments.get().devices))  # type: ignore[arg-type]
         for a in piecewise.runs.get().attempts.all()),
        Decimal(0),
    )
    assert abs(_ledger_cost(piecewise) - expected) <= CENT
    assert abs(_ledger_cost(one_shot) - expected) <= CENT
    assert abs(_ledger_cost(piecewise) - _ledger_cost(one_shot)) <= CENT
    for pool in pools:
        assert UsageEntry.objects.filter(pool=pool, kind=EntryKind.CLOSE).count() == len(attempts)

    count = UsageEntry.objects.count()
    assert accrual_run(now=final_now + timedelta(hours=1)) == 0
    assert UsageEntry.objects.count() == count
