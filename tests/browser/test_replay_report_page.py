"""`simulate --report`'s page in Chromium, opened from disk with no server: every chart draws, from
the Plotly.js inside the page, with no script error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apps.scheduling.simulate import main
from tests.fixtures.browser import screenshot
from tests.scheduling.test_simulate import synthetic, write_trace

pytestmark = [pytest.mark.browser]


def test_replay_report_draws_every_chart(tmp_path: Path, browser_page: Any) -> None:
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(120, seed=4, rate_s=60.0)]
    trace = write_trace(tmp_path / "t.csv", rows)
    report = tmp_path / "replay.html"
    assert main([str(trace), "--nodes", "1", "--policy", "all", "--report", str(report)]) == 0
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # Any request off the disk would mean the page is not self-contained.
    requests: list[str] = []
    page.on("request", lambda req: requests.append(req.url) if not req.url.startswith(("file:", "data:")) else None)
    page.goto(report.as_uri())
    sections = page.locator("section.chart")
    count = sections.count()
    assert count >= 4
    page.wait_for_function(f"document.querySelectorAll('section.chart .main-svg').length >= {count}")
    for i in range(count):
        box = sections.nth(i).locator(".main-svg").first.bounding_box()
        assert box is not None and box["height"] > 300 and box["width"] > 800
    # Chart text is SVG, which has no innerText: read textContent.
    titles = page.eval_on_selector_all(".gtitle", "els => els.map(e => e.textContent)")
    assert any(t.startswith("How long runs took") for t in titles)
    assert any(t.startswith("trainyard: the estimate at submission") for t in titles)
    # The stops chart draws a bar per count and the cap's line with its label.
    stops = sections.nth(2).evaluate("el => el.textContent")
    assert "How often runs were stopped" in stops and "issue 28's cap: 10" in stops
    assert errors == [] and requests == []
    screenshot(page, "replay-report")
