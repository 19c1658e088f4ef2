"""A fresh stack as `make run` seeds it (seed_demo --history), read in Chromium (issue 29): the
runs list's demo runs are minutes old, not "1 hour ago"; finance's top runs have "Wh / step" and
"final metric"; the demo quotas fit the one-device local pool (no over-commitment note); the
Django admin lists Runs and says "Usage entries". Django's live_server; screenshots
fresh-runs-list.png, fresh-finance.png, fresh-admin.png."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from apps.nodes.models import Device, Node, NodePool
from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_fresh_stacks_demo_reads_true(live_server: Any, browser_page: Any) -> None:
    page = browser_page
    call_command("seed_demo", "--history", stdout=StringIO())
    # The local agent `make run` starts: one CPU slot.
    node = Node.objects.create(pool=NodePool.objects.get(name="local"), hostname="laptop", agent_uid="laptop-uid")
    Device.objects.create(node=node, index=0, kind="cpu")

    login(page, live_server, "alice")
    page.goto(live_server.url + "/runs/?q=digits")
    ages = page.eval_on_selector_all("#run-rows tr[data-run] td:last-child", "cells => cells.map(c => c.textContent.trim())")
    demo = [a for a in ages if "minute" in a]
    assert len(demo) >= 4 and not any("hour ago" in a for a in ages[:4]), ages
    screenshot(page, "fresh-runs-list")
    page.click("button:has-text('Log out'), a:has-text('Log out')")

    login(page, live_server, "carol")
    page.goto(live_server.url + "/finance/")
    rows = page.locator("#top-runs tbody tr")
    assert rows.count() >= 5
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        texts = [cells.nth(j).inner_text().strip() for j in range(cells.count())]
        assert texts[-2] not in ("", "–") and re.match(r"(val_accuracy|loss)=", texts[-1]), texts
    assert page.locator(".overcommit").count() == 0
    screenshot(page, "fresh-finance")
    page.click("button:has-text('Log out'), a:has-text('Log out')")

    login(page, live_server, "admin")
    page.goto(live_server.url + "/admin/")
    text = page.inner_text("#content")
    assert "Usage entries" in text and "Webhook deliveries" in text and "entrys" not in text and "deliverys" not in text
    assert page.locator("a[href='/admin/runs/run/']").count() >= 1
    screenshot(page, "fresh-admin")
