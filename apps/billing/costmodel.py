"""The cost model: dated prices, intervals split at price changes and period boundaries, and
device-seconds turned into money. Plain Python (no Django) so it is property-tested directly
and reused by the trace simulator.

Rounding rules, chosen so that accruing in many small pieces agrees with one big piece:
- time is exact (microseconds, from the datetimes), device-seconds are kept to the millisecond;
- a segment's cost is devices x exact seconds x price / 3600, rounded half-even to
  ``COST_QUANTUM`` (a millionth of a currency unit) - so N pieces can differ from one piece by
  at most N/2 millionths, far below a cent for any realistic number of accrual ticks;
- money shown to people is rounded half-up to the cent (``to_cents``), except a limit's figures:
  what is left is rounded down and what is over (or a cost refused against it) up
  (``cents_down``, ``cents_up``), so a page never shows money left that is not there, nor a
  budget within its limit that is over it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

COST_QUANTUM = Decimal("0.000001")
SECONDS_QUANTUM = Decimal("0.001")
CENT = Decimal("0.01")
ZERO = Decimal("0")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, order=True)
class PricePoint:
    """From ``effective_from`` on (until the next point), a device-hour costs ``price``."""

    effective_from: datetime
    price: Decimal


@dataclass(frozen=True)
class Segment:
    """A piece of usage at one price, inside one budget period."""

    start: datetime
    end: datetime
    devices: int
    price: Decimal
    device_seconds: Decimal
    cost: Decimal


def _sorted(prices: Iterable[PricePoint]) -> list[PricePoint]:
    return sorted(prices, key=lambda p: p.effective_from)


def price_in_force(prices: Sequence[PricePoint], at: datetime) -> Decimal:
    """The price of the latest point effective at or before ``at``; zero before the first one
    (no price was set, so nothing was charged - setting a price later never rewrites that)."""
    ordered = _sorted(prices)
    starts = [p.effective_from for p in ordered]
    index = bisect.bisect_right(starts, at) - 1
    return ordered[index].price if index >= 0 else ZERO


def exact_seconds(start: datetime, end: datetime) -> Decimal:
    delta = end - start
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return Decimal(micros) / Decimal(1_000_000)


def segment_cost(*, devices: int, seconds: Decimal, price: Decimal) -> Decimal:
    return (Decimal(devices) * seconds * price / Decimal(3600)).quantize(COST_QUANTUM, rounding=ROUND_HALF_EVEN)


def to_cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def cents_down(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_FLOOR)


def cents_up(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_CEILING)


def money(amount: Decimal) -> str:
    """An amount as people read it: "$1,234.50"."""
    return f"${to_cents(amount):,.2f}"


def month_start(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(at: datetime) -> datetime:
    first = month_start(at)
    return first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)


def month_boundaries(start: datetime, end: datetime) -> list[datetime]:
    """Month starts strictly inside (start, end): where a budget period rolls over."""
    out: list[datetime] = []
    cursor = next_month_start(start)
    while cursor < end:
        out.append(cursor)
        cursor = next_month_start(cursor)
    return out


def split_interval(
    prices: Sequence[PricePoint],
    start: datetime,
    end: datetime,
    *,
    devices: int,
    boundaries: Callable[[datetime, datetime], list[datetime]] = month_boundaries,
) -> list[Segment]:
    """Cut [start, end) at every price change and period boundary and cost each piece."""
    if end <= start:
        return []
    cuts = {start, end}
    cuts.update(p.effective_from for p in prices if start < p.effective_from < end)
    cuts.update(b for b in boundaries(start, end) if start < b < end)
    points = sorted(cuts)
    segments = []
    for a, b in zip(points, points[1:], strict=False):
        price = price_in_force(prices, a)
        seconds = exact_seconds(a, b)
        segments.append(
            Segment(
                start=a,
                end=b,
                devices=devices,
                price=price,
                device_seconds=(Decimal(devices) * seconds).quantize(SECONDS_QUANTUM, rounding=ROUND_HALF_EVEN),
                cost=segment_cost(devices=devices, seconds=seconds, price=price),
            )
        )
    return segments


@dataclass(frozen=True)
class AccrualPlan:
    segments: list[Segment]
    closes: bool  # the attempt has ended and this plan brings it to its end
    accrued_to: datetime
    # Time charged past the attempt's real end (it ended while the ledger ran on, e.g. a lost
    # node reported late): refunded as negative corrections, never by editing old entries.
    refunds: list[Segment] = field(default_factory=list)


def accrual_plan(
    *,
    prices: Sequence[PricePoint],
    devices: int,
    started_at: datetime,
    ended_at: datetime | None,
    accrued_to: datetime | None,
    now: datetime,
) -> AccrualPlan:
    """What to add to the ledger for one attempt so it is accrued up to ``now`` (or its end).

    ``accrued_to`` is where the ledger already reaches (None: nothing yet). The result only
    ever covers time after it, so running the plan twice adds nothing the second time.
    """
    begin = max(started_at, accrued_to) if accrued_to is not None else started_at
    stop = min(now, ended_at) if ended_at is not None else now
    segments = split_interval(prices, begin, stop, devices=devices) if stop > begin else []
    reached = segments[-1].end if segments else begin
    refunds: list[Segment] = []
    if ended_at is not None and accrued_to is not None and accrued_to > max(ended_at, started_at):
        over = split_interval(prices, max(ended_at, started_at), accrued_to, devices=devices)
        refunds = [Segment(s.start, s.end, s.devices, s.price, -s.device_seconds, -s.cost) for s in over]
    return AccrualPlan(segments=segments, closes=ended_at is not None and reached >= ended_at, accrued_to=reached, refunds=refunds)


def one_shot_cost(prices: Sequence[PricePoint], start: datetime, end: datetime, devices: int) -> Decimal:
    """Exact (unrounded) cost of a whole interval: what the property tests compare against."""
    total = ZERO
    points = sorted({start, end, *(p.effective_from for p in prices if start < p.effective_from < end)})
    for a, b in zip(points, points[1:], strict=False):
        total += Decimal(devices) * exact_seconds(a, b) * price_in_force(prices, a) / Decimal(3600)
    return total


def predicted_cost(*, devices: int, runtime_s: int, price: Decimal) -> Decimal:
    return segment_cost(devices=devices, seconds=Decimal(runtime_s), price=price)


def linear_forecast(*, spent: Decimal, period_start: datetime, period_end: datetime, now: datetime) -> Decimal:
    """Spend at the period's end if it goes on at the average rate so far."""
    elapsed = exact_seconds(period_start, min(max(now, period_start), period_end))
    total = exact_seconds(period_start, period_end)
    if elapsed <= 0:
        return spent
    return (spent * total / elapsed).quantize(COST_QUANTUM, rounding=ROUND_HALF_EVEN)


def day_floor(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def days_between(start: datetime, end: datetime) -> list[datetime]:
    out, cursor = [], day_floor(start)
    while cursor < end:
        out.append(cursor)
        cursor += timedelta(days=1)
    return out
