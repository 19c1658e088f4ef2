"""The home page's runs card in Chromium: it lists a waiting run and follows it, without a reload,
when the run leaves the line."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]


def test_home_card_follows_a_run_live(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    token = live_stack.token("alice")
    # No worker runs in this stack, so the run stays queued until it is cancelled below.
    tags = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "home-card"}
    body = {"project": "vision/digits", "template": "digits-classifier", "params": {}, "tags": tags}
    run = live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/")
    card = page.locator("#runs-panel")
    row = card.locator(".runs-active tbody tr")
    assert row.count() == 1 and f"#{run['id']}" in row.inner_text() and "queued" in row.inner_text()
    assert "1 waiting" in card.inner_text()
    page.evaluate("window.__sameDocument = true")

    live_stack.api("POST", f"/api/v1/runs/{run['id']}/cancel/", {}, token=token)
    page.wait_for_function("() => !document.querySelector('#runs-panel .runs-active')", timeout=15_000)
    text = card.inner_text()
    assert "0 waiting" in text and "Nothing running or waiting." in text
    assert f"#{run['id']}" in card.locator(".runs-recent li").first.inner_text()
    assert page.evaluate("window.__sameDocument") is True, "the card must refresh in place, not reload the page"
    screenshot(page, "home-runs-card")
