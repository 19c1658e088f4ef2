"""One time format across pages (issue 29): server-rendered times (tokens, secrets, audit log,
model versions) are <time class="when"> elements that static/core/times.js writes in the viewer's
zone, named, as the run page, nodes page and bell write theirs ("Nov 26, 2026, 9:30:05 PM UTC").
Django's live_server; screenshot test-artifacts/tokens-local-time.png."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from apps.accounts.services import api_token_create
from apps.runs.models import RunStatus
from tests.fixtures.browser import screenshot
from tests.tracking.conftest import make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What the run page's times look like in Chromium's en-US (tests/tracking/test_browser.py),
# with or without the zone's name after it.
LOCAL_TIME = r"^[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d{2}:\d{2} [AP]M( \S+)?$"


def test_server_rendered_times_read_as_the_run_pages(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    api_token_create(user=cast.alice, name="laptop")
    html = Client()
    html.force_login(cast.alice)
    raw = html.get("/account/tokens/").content.decode()
    assert re.search(r'<time class="when" datetime="\d{4}-\d{2}-\d{2}T[^"]+">\d{4}-\d{2}-\d{2} \d{2}:\d{2} \w+</time>', raw), raw
    page.goto(f"{live_server.url}/account/tokens/")
    assert page.locator("time.when").count() >= 1, (page.url, page.content()[:3000])
    created = page.locator("time.when").first.inner_text()
    assert re.match(LOCAL_TIME, created), created
    assert page.locator("time.when").first.get_attribute("title")  # the exact ISO time on hover
    screenshot(page, "tokens-local-time")
    # The run page writes its times the same way.
    run = make_run(cast.digits, status=RunStatus.QUEUED, name="timed")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_selector("#run-info time, .card time")
    shown = page.locator("#content time").first.inner_text()
    assert re.match(LOCAL_TIME, shown) and shown.split(",")[0] == created.split(",")[0], (shown, created)
