"""The submit page over budget in Chromium: the live forecast says the run would be refused (not
that it would wait), and the refusal after submitting shows once, in words, with no raw key."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]
EXPECTED = "document.getElementById('expected-start').textContent"


def test_submit_page_over_budget_says_refused_once(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    # Every vision budget down to nothing.
    live_stack.manage("shell", "-c", "from apps.billing.models import Budget; "
                      "Budget.objects.filter(team__slug='vision').update(amount='0')")
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/runs/new/?template=digits-classifier")
    page.wait_for_function(f"{EXPECTED}.includes('Would ')", timeout=30_000)
    # The longest digits run (predicted from the seeded history's pace) costs a cent or more.
    page.fill("#id_p_steps", "100000")
    page.wait_for_function(f"{EXPECTED}.includes('Would be refused')", timeout=30_000)
    line = page.inner_text("#expected-start")
    assert "Would be refused: Budget" in line and "Would wait" not in line, line
    assert "over-budget" in (page.get_attribute("#expected-start", "class") or "")

    page.click("#submit-run")
    page.wait_for_selector("#submit-errors")
    page.wait_for_function(f"{EXPECTED}.includes('Would ')", timeout=30_000)
    errors = page.inner_text("#submit-errors")
    assert errors.count("this run would cost") == 1 and "non_field" not in errors.lower(), errors
    assert "Non field" not in page.content()
    assert "Would be refused: Budget" in page.inner_text("#expected-start")
    screenshot(page, "submit-over-budget")
    assert live_stack.query("SELECT COUNT(*) FROM runs_run WHERE project_id IN "
                            "(SELECT id FROM tenants_project WHERE slug = 'digits') AND status = 'queued'")[0][0] == 0
