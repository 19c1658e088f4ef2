"""The runs list shows why a run waits or failed under its status, as text in the row (touch and
keyboard users never see a title tooltip), cut to two lines by CSS, read from the run's own
status_reason (no query per row). A run without a reason gets no extra line."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.runs.models import RunStatus
from tests.fixtures.browser import login, screenshot
from tests.tracking.conftest import make_run

WAITS = "Waiting for 2 devices in pool track: 1 is free and #7 of team nlp holds the other until about 14:20."
FAILED = "exit code 1: ZeroDivisionError: division by zero (see the logs); gave up after 3 restarts"


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _row(html: str, pk: int) -> str:
    match = re.search(rf'<tr data-run="{pk}".*?</tr>', html, re.S)
    assert match, f"no row for run {pk}"
    return match.group(0)


def _visible_text(html: str) -> str:
    """What a row reads as on screen: its text, not its attributes (a title is a tooltip)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _status_cell(row: str) -> str:
    match = re.search(r'<td><span class="badge status-.*?</td>', row, re.S)
    assert match, row
    return match.group(0)


@pytest.mark.parametrize("partial", ["", "&partial=1"])
def test_a_waiting_or_failed_runs_reason_is_in_its_row(cast: Any, partial: str) -> None:
    queued = make_run(cast.digits, name="waits", status=RunStatus.QUEUED, status_reason=WAITS, family="why")
    failed = make_run(cast.digits, name="broke", status=RunStatus.FAILED, status_reason=FAILED, family="why")
    fine = make_run(cast.digits, name="fine", status=RunStatus.SUCCEEDED, status_reason="", family="why")
    html = _client(cast.alice).get(f"/runs/?family=why{partial}").content.decode()
    for run, reason in ((queued, WAITS), (failed, FAILED)):
        cell = _status_cell(_row(html, run.pk))
        assert reason in _visible_text(cell), cell
        # Whole in the title too, for a pointer over the line that CSS cut short.
        assert f'title="{reason}"' in cell
    assert "run-reason" not in _row(html, fine.pk)


def test_a_reason_is_text_not_markup(cast: Any) -> None:
    run = make_run(cast.digits, status=RunStatus.FAILED, status_reason="<b>bad</b> & worse")
    row = _row(_client(cast.alice).get("/runs/").content.decode(), run.pk)
    assert "&lt;b&gt;bad&lt;/b&gt; &amp; worse" in _visible_text(_status_cell(row)) and "<b>" not in row


def test_the_reasons_cost_no_query_per_row(cast: Any) -> None:
    client = _client(cast.alice)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/runs/?partial=1").status_code == 200
        return len(ctx.captured_queries)

    for _ in range(3):
        make_run(cast.digits, status=RunStatus.QUEUED, status_reason=WAITS)
    few = queries()
    for _ in range(27):
        make_run(cast.digits, status=RunStatus.FAILED, status_reason=FAILED)
    assert queries() == few


@pytest.mark.browser
@pytest.mark.live
def test_the_reason_is_at_most_two_muted_lines_cut_to_the_column(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    token = live_stack.token("alice")
    tags = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "why-list"}
    body = {"project": "vision/digits", "template": "digits-classifier", "params": {}, "tags": tags}
    waits, plain = (live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)["id"] for _ in range(2))
    # No worker runs in this stack, so nothing writes a reason but this.
    live_stack.query("UPDATE runs_run SET status_reason = ? WHERE id = ?", (WAITS, waits))
    live_stack.query("UPDATE runs_run SET status_reason = '' WHERE id = ?", (plain,))
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/runs/?family=why-list")
    line = page.locator(f"tr[data-run='{waits}'] .run-reason")
    assert line.is_visible()
    shape = line.evaluate("""el => ({ lines: Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)),
        cut: el.scrollHeight > el.clientHeight, cell: el.closest('td').clientWidth, width: el.getBoundingClientRect().width })""")
    assert shape["lines"] == 2 and shape["cut"] and shape["width"] <= shape["cell"], shape
    assert page.locator(f"tr[data-run='{plain}'] .run-reason").count() == 0
    heights = [page.locator(f"tr[data-run='{pk}']").evaluate("r => r.getBoundingClientRect().height") for pk in (waits, plain)]
    assert heights[0] - heights[1] < 40, heights  # two short lines more at most, not a paragraph
    screenshot(page, "runs-list-reason")
