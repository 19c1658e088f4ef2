"""The bell in Chromium: a run finishing while the page is open raises the badge on the next poll;
the popover lists it with its time and link, keyboard-reachable; "Mark all read" clears the badge."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

# Walks a queued run to succeeded through the transition table (no worker or agent runs in this
# stack), in the stack's own database, so the audit receiver makes the notification.
FINISH = """
from apps.runs.models import Run
from apps.runs.services.transitions import run_transition
run = Run.objects.get(pk={pk})
for to in ("scheduled", "running", "succeeded"):
    run_transition(run, to=to, action="run." + to)
"""


def test_bell_shows_a_finished_run_and_marks_all_read(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    token = live_stack.token("alice")
    body = {"project": "vision/digits", "template": "digits-classifier", "params": {},
            "tags": {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "bell"}}
    cancelled = live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)
    live_stack.api("POST", f"/api/v1/runs/{cancelled['id']}/cancel/", {}, token=token)
    run = live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/runs/")
    bell = page.locator("#bell-button")
    before = live_stack.api("GET", "/api/v1/notifications/unread-count/", token=token)["unread"]
    assert before >= 1 and bell.get_attribute("aria-label") == f"Notifications, {before} unread"

    live_stack.manage("shell", "-c", FINISH.format(pk=run["id"]))
    page.wait_for_function(f"() => document.getElementById('bell-badge').textContent.trim() === '{before + 1}'",
                           timeout=60_000)  # the next poll (every 15 s) brings it
    assert bell.get_attribute("aria-label") == f"Notifications, {before + 1} unread"
    assert page.locator("#bell-status").inner_text() == "1 new notification"  # a polite live region says it once

    bell.focus()
    page.keyboard.press("Enter")
    panel = page.locator("#bell-panel")
    first = panel.locator("#bell-list li[data-notification]").first
    first.wait_for(timeout=15_000)
    assert bell.get_attribute("aria-expanded") == "true"
    assert f"Run #{run['id']} succeeded" in first.inner_text() and "just now" in first.inner_text()
    assert first.locator("a").get_attribute("href") == f"/runs/{run['id']}/"
    assert f"Run #{cancelled['id']} was cancelled" in panel.inner_text()
    screenshot(page, "notifications-bell")

    page.keyboard.press("Tab")  # from the bell into the popover: its first control, then the list
    assert page.evaluate("document.activeElement.id") == "bell-read-all"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == f"/runs/{run['id']}/"
    page.keyboard.press("Escape")
    assert panel.is_hidden() and page.evaluate("document.activeElement.id") == "bell-button"

    page.keyboard.press("Enter")
    page.locator("#bell-read-all").click()
    page.wait_for_function("() => document.getElementById('bell-badge').hidden", timeout=15_000)
    assert bell.get_attribute("aria-label") == "Notifications, none unread"
    assert panel.locator("li.unread").count() == 0
    assert live_stack.api("GET", "/api/v1/notifications/unread-count/", token=token) == {"unread": 0}

    page.goto(live_stack.url + "/notifications/")
    item = page.locator(f"#notification-list li:has(a[href='/runs/{run['id']}/'])")
    assert f"Run #{run['id']} succeeded" in item.inner_text() and "unread" not in (item.get_attribute("class") or "")
    assert item.locator("time[datetime]").count() == 1
    screenshot(page, "notifications-page")
