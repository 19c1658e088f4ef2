"""The budgets page after a budget is raised, in Chromium (issue 29): it lists only the alerts
crossed at the current amount ("Alerts sent: 50%", not "50%, 80%, 100%" beside 71.6% used).
Django's live_server; screenshots budget-alerts-before-raise.png, budget-alerts-after-raise.png.
tests/billing/test_budget_one_truth.py has the rules (re-arming, one message naming the highest)."""

from __future__ import annotations

from typing import Any

import pytest

from apps.billing.services import budget_alerts_check, budget_update
from tests.billing.test_budget_one_truth import overspent  # noqa: F401 - fixture
from tests.fixtures.browser import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_raised_budget_lists_only_the_alerts_crossed_at_its_amount(cast: Any, overspent: Any, live_server: Any,  # noqa: F811
                                                                      as_alice: Any) -> None:
    page = as_alice
    budget = overspent[0]
    budget_alerts_check()
    page.goto(f"{live_server.url}/budgets/")
    assert "Alerts sent: 50%, 80%, 100%" in page.inner_text("main")
    screenshot(page, "budget-alerts-before-raise")
    budget_update(budget=budget, amount="12.00")  # $8.59 of $12.00: 71.6%
    page.goto(f"{live_server.url}/budgets/")
    text = page.inner_text("main")
    assert "$8.59 spent of $12.00" in text and "$3.41 left" in text, text
    sent = text.split("Alerts sent:")[1].splitlines()[0]
    assert sent.strip().rstrip(".") == "50%", sent
    screenshot(page, "budget-alerts-after-raise")
