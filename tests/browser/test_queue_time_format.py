"""The queue's estimated starts in the one time format (issue 29, item 7f): each estimate and its
range is a <time class="when"> that static/core/times.js writes in the viewer's zone, named, as
the run page and the tokens page write theirs ("Nov 26, 2026, 9:30:05 PM UTC"), the relative
"(in 55 seconds)" kept beside it, and so again after the page's 7-second refresh.
Django's live_server; screenshot test-artifacts/queue-time-format.png."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from apps.runs.models import Run
from apps.scheduling.services import scheduling_pass
from tests.browser.test_queue_estimate_eta import running_ahead
from tests.browser.test_time_format import LOCAL_TIME
from tests.fixtures.browser import screenshot
from tests.scheduling.test_estimate_consistency import _run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_queue_writes_its_estimates_in_the_one_time_format(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    pool, ahead, began = running_ahead(cast)
    Run.objects.filter(pk=ahead.pk).update(started_at=began)
    waiting = _run(cast, pool, name="waiting")
    scheduling_pass()

    page.goto(f"{live_server.url}/queue/")
    assert page.inner_text("table.queue-table thead").lower().count("estimated start") == 1  # no zone named in it
    row = page.locator(f"tr:has(a[href='/runs/{waiting.pk}/'])").first
    cell = row.locator("td.estimate")

    def check() -> None:
        shown = cell.locator("time.when").first
        text = shown.inner_text()
        assert re.match(LOCAL_TIME, text), (text, cell.inner_text())
        assert shown.get_attribute("title") and shown.get_attribute("data-at")  # the exact ISO time on hover
        assert re.search(r"\((in \d+ (seconds?|minutes?)|due now)\)", cell.inner_text()), cell.inner_text()
        for t in cell.locator(".range time.when").all():  # the range, when there is one, the same way
            assert re.match(LOCAL_TIME, t.inner_text()), t.inner_text()
        assert not re.search(r"(^|\s)\d{2}:\d{2}(\s|$)", cell.inner_text()), cell.inner_text()  # no bare HH:MM

    page.wait_for_function("sel => { const t = document.querySelector(sel); return t && /[AP]M/.test(t.textContent); }",
                           arg=f"tr[data-run='{waiting.pk}'] td.estimate time.when")
    check()
    # After a refresh swaps the pools in again (the estimate moved a minute), the new cells are
    # rewritten too.
    before = cell.locator("time.when").first.get_attribute("data-at")
    Run.objects.filter(pk=waiting.pk).update(estimated_start=waiting_start(waiting.pk) + timedelta(minutes=1))
    page.wait_for_function(
        "([sel, before]) => { const t = document.querySelector(sel);"
        " return t && t.dataset.at !== before && /[AP]M/.test(t.textContent); }",
        arg=[f"tr[data-run='{waiting.pk}'] td.estimate time.when", before], timeout=60_000)
    check()
    screenshot(page, "queue-time-format")


def waiting_start(pk: int) -> Any:
    at = Run.objects.get(pk=pk).estimated_start
    assert at is not None
    return at
