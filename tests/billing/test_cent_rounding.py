"""A budget's limit holds to the exact amount: no rounding moves it, and what is shown left or
over never says a cent is there, or not over, when the exact figures disagree."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from apps.billing.models import Budget
from apps.billing.selectors import BudgetLeft
from apps.billing.services import budget_create
from apps.core.errors import FieldError


def test_a_sub_cent_amount_is_refused_not_rounded_up(cast: Any) -> None:
    # Half-even rounding stored 10.015 as 10.02: spend could pass the limit that was set.
    with pytest.raises(FieldError) as err:
        budget_create(team=cast.vision, project=cast.digits, amount="10.015")
    assert err.value.fields == {"amount": ["must have at most 2 decimal places (got 10.015)"]}
    assert not Budget.objects.exists()
    assert budget_create(team=cast.vision, project=cast.digits, amount="10.010").amount == Decimal("10.01")


def test_left_rounds_down_and_over_rounds_up() -> None:
    nearly = BudgetLeft(amount=Decimal("10.00"), spent=Decimal("9.995"), reserved=Decimal("0"))
    # Half a cent left is not a cent: a run costing $0.008 ("$0.01") is refused, and the page agrees.
    assert not nearly.fits(Decimal("0.008")) and nearly.fits(Decimal("0.005"))
    assert nearly.remaining_cents == Decimal("0.00") and nearly.text == "$0.00 left"
    barely_over = BudgetLeft(amount=Decimal("10.00"), spent=Decimal("10.004"), reserved=Decimal("0"))
    assert barely_over.overspent_cents == Decimal("0.01")
    assert barely_over.text == "$0.00 left (overspent by $0.01)"
    exact = BudgetLeft(amount=Decimal("10.00"), spent=Decimal("3.50"), reserved=Decimal("1.25"))
    assert exact.text == "$5.25 left" and exact.overspent_cents == 0
