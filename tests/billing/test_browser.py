"""In Chromium against a live stack: carol (finance) sees the spend charts and exports the
ledger as CSV; alice is refused the finance console but sees her project's burn-down."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]


@pytest.fixture
def spend_stack(live_stack: Any) -> Any:
    live_stack.manage("seed_demo")  # a second time: seeding is idempotent
    assert live_stack.query("SELECT COUNT(*) FROM billing_budget")[0][0] == 2
    assert live_stack.query("SELECT COUNT(*) FROM billing_poolprice")[0][0] == 1
    result = live_stack.manage("shell", "-c", "import tests.billing.live_spend as s; s.main()", check=False)
    assert result.returncode == 0, result.stderr
    return live_stack


def test_finance_console_and_burndown(spend_stack: Any, browser_page: Any) -> None:
    stack, page = spend_stack, browser_page
    login(page, stack, "carol")
    page.goto(stack.url + "/finance/")
    # Plotly drew the stacked spend charts (one trace per team) and the burn-downs.
    page.wait_for_selector("#spend-team .main-svg")
    assert page.locator("#spend-team .trace.bars").count() == 2
    assert page.locator("#spend-project .main-svg").count() >= 1
    assert page.locator(".budget-chart .main-svg").count() >= 2
    assert "vision" in page.inner_text("#spend-team-table") and "nlp" in page.inner_text("#spend-team-table")
    assert "lr-sweep" in page.inner_text("#families")
    screenshot(page, "billing-finance-console")

    with page.expect_download() as download_info:
        page.click("#export-csv")
    rows = list(csv.DictReader(io.StringIO(open(download_info.value.path()).read())))
    assert {r["team"] for r in rows} == {"vision", "nlp"} and all(r["cost"] for r in rows)

    # A quota edited in place is saved (and audited by the service).
    field = page.locator("#quotas input[name=guaranteed_devices]").first
    field.fill("3")
    page.locator("#quotas button", has_text="Save").first.click()
    page.wait_for_selector(".messages")
    assert "saved" in page.inner_text(".messages")
    assert stack.query("SELECT COUNT(*) FROM audit_auditevent WHERE action = 'quota.update'")[0][0] >= 1

    alice = page.context.browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        other = alice.new_page()
        login(other, stack, "alice")
        response = other.goto(stack.url + "/finance/")
        assert response is not None and response.status == 403
        other.goto(stack.url + "/budgets/")
        other.wait_for_selector(".budget-chart .main-svg")
        text = other.inner_text("main")
        assert "vision/digits" in text and "nlp/tiny-lm" not in text and "forecast" in text
        screenshot(other, "billing-budgets-alice")
        project_id = stack.query("SELECT p.id FROM tenants_project p JOIN tenants_team t ON t.id = p.team_id "
                                 "WHERE t.slug = 'vision' AND p.slug = 'digits'")[0][0]
        other.goto(f"{stack.url}/projects/{project_id}/")
        other.wait_for_selector(".budget-panel .main-svg")
        screenshot(other, "billing-project-panel-alice")
        # The submission form says what share of the budget's remainder the run would take.
        other.goto(f"{stack.url}/runs/new/?project={project_id}&template=digits-classifier")
        other.wait_for_selector("#budget-share:not([hidden])")
        share = other.inner_text("#budget-share")
        assert share.startswith("Budget 'vision/digits") and "left" in share and "% of it." in share and "at most" in share, share
        screenshot(other, "billing-submit-budget-share")
    finally:
        alice.close()
