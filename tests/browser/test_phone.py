"""Every page reads on a phone: at 390 px nothing widens the page past the screen.

People check a run or the queue from their phone. A wide table or a fixed-width chart grid
used to make the whole page scroll sideways, pushing cards and charts half off screen; now
wide tables scroll inside their own box and grids drop to one column.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.browser import login, page_in_new_context, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

PHONE = {"width": 390, "height": 844}

# What sticks out past the right edge without a scrolling box around it: the culprits to name.
OVERFLOWING = """() => {
  const width = window.innerWidth, out = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) continue;
    let inside = false;
    for (let p = el.parentElement; p && !inside; p = p.parentElement) {
      inside = ['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX);
    }
    if (!inside) out.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className} (${Math.round(box.right)}px)`);
  }
  return out.slice(0, 5);
}"""


@pytest.fixture
def phone_page(chromium: Any) -> Iterator[Any]:
    with page_in_new_context(chromium, viewport=PHONE, is_mobile=True, has_touch=True) as page:
        yield page


def _assert_fits(page: Any, name: str) -> None:
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > PHONE["width"]:
        screenshot(page, f"phone-{name}")
    assert width <= PHONE["width"], f"{page.url} is {width}px wide on a {PHONE['width']}px phone: {page.evaluate(OVERFLOWING)}"


def test_pages_fit_a_phone(live_stack: Any, phone_page: Any) -> None:
    page = phone_page
    run_ids = [int(row[0]) for row in live_stack.query("SELECT id FROM runs_run ORDER BY id LIMIT 3", ())]
    assert len(run_ids) == 3, "seed_demo made fewer than three runs"
    project = int(live_stack.query("SELECT id FROM tenants_project WHERE slug = ?", ("digits",))[0][0])

    login(page, live_stack, "alice")
    pages = {
        "home": "/",
        "runs": "/runs/",
        "submit": "/runs/new/",
        "run": f"/runs/{run_ids[0]}/",
        "compare": "/compare/?runs=" + ",".join(map(str, run_ids)),
        "queue": "/queue/",
        "nodes": "/nodes/",
        "budgets": "/budgets/",
        "project": f"/projects/{project}/",
        "webhooks": f"/projects/{project}/webhooks/",
        "tokens": "/account/tokens/",
    }
    for name, path in pages.items():
        response = page.goto(live_stack.url + path)
        assert response is not None and response.status == 200, path
        _assert_fits(page, name)

    # The runs table is wider than a phone: it must scroll inside its box, not be cut off.
    page.goto(live_stack.url + "/runs/")
    table = page.locator("table.runs-table")
    assert table.evaluate("t => t.scrollWidth > t.clientWidth && getComputedStyle(t).overflowX === 'auto'")
    # The menu wraps onto lines of its own rather than running off the screen.
    assert page.locator(".mainnav a").last.evaluate("a => a.getBoundingClientRect().right") <= PHONE["width"]

    page.context.clear_cookies()
    login(page, live_stack, "carol")
    for name, path in {"finance": "/finance/", "finance-budgets": "/budgets/"}.items():
        page.goto(live_stack.url + path)
        _assert_fits(page, name)
