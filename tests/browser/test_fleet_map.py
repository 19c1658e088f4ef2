"""The Nodes page's fleet map in real Chromium: a square's details come up on hover and on keyboard
focus (and stay while the pointer moves onto them), a screen reader gets them as the square's text,
the arrow keys move between squares, a square leads to its row, a lost node's sentence is in view,
and a device table someone opened stays open, with the focus on it, when the page refreshes itself."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.test_accessibility import AUDIT, CONTRAST, NAMES
from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

# Run in the live stack (`manage.py shell -c`): a pool of three nodes. fleet-01 with alice's run on
# two of its GPUs, fleet-02 all held by a run of bob's team, fleet-03 lost. No worker runs in this
# stack, so nothing moves them. Prints the ids as JSON.
SETUP = """
import json
from django.utils import timezone
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Device, Node, NodePool
from apps.runs.models import Assignment, Attempt, Run
from apps.tenants.models import Project

now = timezone.now()
pool = NodePool.objects.create(name="fleet", description="the fleet map's pool")
template = JobTemplate.objects.order_by("slug", "version").first()

def node(hostname, utilization, state="ready"):
    n = Node.objects.create(pool=pool, hostname=hostname, agent_uid=hostname, state=state, address="10.1.0.1", cpus=64,
                            memory_bytes=512 << 30, agent_version="1.0", last_heartbeat_at=now)
    Device.objects.bulk_create([Device(node=n, index=i, kind="gpu", model="NVIDIA A100-SXM4-80GB", memory_bytes=80 << 30,
                                       utilization=u, power_w=None if u is None else 60.0 + 3 * u)
                                for i, u in enumerate(utilization)])
    return n

def hold(n, team, project, devices, name):
    run = Run.objects.create(project=Project.objects.get(team__slug=team, slug=project), template=template, pool=pool,
                             entrypoint="python -c pass", name=name, status="running", devices_per_node=len(devices), started_at=now)
    attempt = Attempt.objects.create(run=run, number=1, status="running", started_at=now)
    Assignment.objects.create(attempt=attempt, node=n, devices=devices, state="started", started_at=now)
    return run.pk

one = node("fleet-01", [92.0, 88.0, 0.0, None])
two = node("fleet-02", [40.0, 45.0, 50.0, 55.0])
three = node("fleet-03", [None, None], "lost")
mine = hold(one, "vision", "digits", [0, 1], "digits-map")
theirs = hold(two, "nlp", "tiny-lm", [0, 1, 2, 3], "secret-lm")
print(json.dumps({"mine": mine, "theirs": theirs, "nodes": {n.hostname: n.pk for n in (one, two, three)}}))
"""

# The name and description of an element as Chromium's accessibility tree has them: what a screen
# reader is given (not a script's idea of it).
def ax_name(page: Any, selector: str) -> str:
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument")["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        [ax, *_] = cdp.send("Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False})["nodes"]
        return str(ax.get("name", {}).get("value", ""))
    finally:
        cdp.detach()


def test_fleet_map_details_on_hover_and_focus_and_open_tables_survive_a_refresh(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    ids = json.loads(live_stack.manage("shell", "-c", SETUP).stdout.strip().splitlines()[-1])
    mine, theirs, nodes = ids["mine"], ids["theirs"], ids["nodes"]
    one, two = nodes["fleet-01"], nodes["fleet-02"]
    page.clock.install()  # time flows as usual; run_for skips ahead to the next refresh
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/nodes/")
    page.wait_for_load_state("networkidle")
    tip = page.locator("#device-tip")
    square = page.locator(f"a[href='#d{one}-0']")

    # Nothing on the map a screen reader or a keyboard would trip over, and text that reads.
    page.evaluate(NAMES)
    problems = [*page.evaluate(AUDIT), *page.evaluate(CONTRAST)]
    assert not problems, "\n".join(problems)
    screenshot(page, "fleet-map")

    # One square per device, filled when held; one Tab stop per node's squares.
    assert page.locator(f"[data-node='{one}'] .devmap a").count() == 4
    assert page.locator(f"[data-node='{one}'] .devmap a.held").count() == 2
    assert page.locator(".devmap a[tabindex='0']").count() == 3
    # A screen reader gets the details as the square's own text (Chromium's tree, not a guess).
    said = ax_name(page, f"a[href='#d{one}-0']")
    assert said == (f"gpu0 in use by #{mine} digits-map (vision/digits · attempt 1 · rank 0). NVIDIA A100-SXM4-80GB · 80.0 GB. "
                    "Utilization 92 %, power 336.0 W."), said
    assert ax_name(page, f"a[href='#d{two}-1']") == ("gpu1 in use by another team's run. NVIDIA A100-SXM4-80GB · 80.0 GB. "
                                                      "Utilization 45 %, power 195.0 W.")

    # Hover: the details come up by the square, with the run's link; the pointer may move onto them.
    square.hover()
    expect(tip).to_be_visible()
    text = re.sub(r"\s+", " ", tip.inner_text())
    for words in ("gpu0 · in use", "NVIDIA A100-SXM4-80GB · 80.0 GB", "Utilization 92 %", "Power 336.0 W", f"#{mine} digits-map"):
        assert words in text, text
    assert tip.locator(f"a[href='/runs/{mine}/']").count() == 1
    screenshot(page, "fleet-map-hover")
    tip.hover()
    page.clock.run_for(1000)
    expect(tip).to_be_visible()
    page.locator("h1").hover()
    page.clock.run_for(1000)
    expect(tip).to_be_hidden()

    # Keyboard focus: the same details; the arrow keys go along a node and down the map; Escape.
    page.focus(f"a[href='#d{two}-0']")
    expect(tip).to_be_visible()
    assert "another team's run" in tip.inner_text() and tip.locator("a").count() == 0
    assert f"#{theirs}" not in tip.inner_text() and "secret-lm" not in page.content()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.getAttribute('href')") == f"#d{two}-1"
    assert tip.inner_text().startswith("gpu1")
    assert page.get_attribute(f"a[href='#d{two}-1']", "tabindex") == "0"  # Tab comes back here
    page.keyboard.press("ArrowUp")
    assert page.evaluate("document.activeElement.getAttribute('href')") == f"#d{one}-1"
    page.keyboard.press("Escape")
    expect(tip).to_be_hidden()

    # The lost node's sentence is in view, not folded away with its table.
    expect(page.locator("[data-node-name='fleet-03'] .node-state")).to_contain_text("Silent for more than")

    # A table opened from the keyboard stays open, and focused, when the pools are swapped for
    # fresh ones (a reading changed meanwhile, so the refresh does replace them).
    details = page.locator(f"#node-{one}-devices")
    assert not details.evaluate("d => d.open")
    page.focus(f"#node-{one}-devices > summary")
    page.keyboard.press("Enter")
    assert details.evaluate("d => d.open")
    live_stack.query('UPDATE nodes_device SET utilization = 77 WHERE node_id = ? AND "index" = 2', (one,))
    page.evaluate("document.getElementById('node-pools').dataset.old = 'yes'")
    page.clock.run_for(6000)
    page.wait_for_function("() => !document.getElementById('node-pools').dataset.old")
    assert details.evaluate("d => d.open"), "the refresh folded the table up"
    assert page.evaluate("[document.activeElement.tagName, document.activeElement.parentElement.id]") == ["SUMMARY", f"node-{one}-devices"]
    assert page.get_attribute(f"a[href='#d{one}-2']", "class") == "u3"
    assert "77 %" in page.locator(f"#d{one}-2").inner_text()
    assert page.locator("details[open]").count() == 1  # the others stay as the server writes them: closed

    # A square leads to its row: the table opens there and marks it.
    page.click(f"a[href='#d{two}-3']")
    assert page.locator(f"#node-{two}-devices").evaluate("d => d.open")
    expect(page.locator(f"#d{two}-3")).to_have_class("picked")
    assert page.url.endswith(f"#d{two}-3")
    screenshot(page, "fleet-map-open")
