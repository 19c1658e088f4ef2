"""The Nodes page in Chromium: alice sees the local node, its device, state and heartbeat age and
her own run on it, times in her own zone, and the page keeping itself current; an admin drains
the node from the page (and undrains it)."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.agents.helpers import start_agent, submit, wait_status, write
from tests.fixtures.browser import VIEWPORT, login, page_in_new_context, screenshot
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.browser, pytest.mark.live]

JOB = "import time, trainyard\ntrainyard.set_total_steps(600)\nfor s in range(600):\n    trainyard.log(s, loss=1.0)\n    time.sleep(0.1)\n"


def test_nodes_page_for_alice_and_drain_by_admin(live_stack: LiveStack, chromium: Any, browser_page: Any, tmp_path: Path) -> None:
    stack, page = live_stack, browser_page
    stack.start_worker()
    start_agent(stack, "node-a")
    run = submit(stack, f"python {write(tmp_path / 'job.py', JOB)}")
    wait_status(stack, run, {"running"}, 60)

    with page_in_new_context(chromium, viewport=VIEWPORT, timezone_id="Asia/Tokyo") as tokyo:
        login(tokyo, stack, "alice")
        tokyo.goto(stack.url + "/nodes/")
        node = tokyo.locator("[data-node-name='node-a']")
        assert node.locator(".badge").first.inner_text() == "busy"
        assert re.search(r"last heartbeat \d+ seconds? ago", node.locator(".node-beat").inner_text())
        assert node.locator(".devmap a.held").count() == 1  # its one CPU slot, held by her run
        # The device table opens from the node's line.
        summary = node.locator("details > summary")
        expect(summary).to_have_accessible_name("Details of node-a")
        summary.click()
        text = node.inner_text()
        # The heartbeat's time in alice's zone, which it names (the server's is UTC).
        beat = node.locator(".node-facts time")
        assert beat.inner_text().endswith("GMT+9"), beat.inner_text()
        assert "cpu0" in text and "CPU slot" in text
        # Her team's run, named as every page names it (the square's own name says it too).
        assert node.get_by_role("link", name=f"#{run}", exact=True).count() == 1
        assert "vision/digits" in text and f"run {run}" not in text
        assert tokyo.locator("button[data-action]").count() == 0, "only admins drain"
        assert tokyo.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
        screenshot(tokyo, "nodes-alice")
        # An open page keeps itself current: the next heartbeats arrive without a reload.
        first = beat.inner_text()
        tokyo.wait_for_function("(first) => document.querySelector(\"[data-node-name='node-a'] .node-facts time\").textContent !== first",
                                arg=first, timeout=20_000)
        assert node.locator("details").evaluate("d => d.open"), "the refresh folded the device table up"

    login(page, stack, "admin")
    page.goto(stack.url + "/nodes/")
    node = page.locator("[data-node-name='node-a']")
    questions: list[str] = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    node.get_by_role("button", name="Drain").click()
    page.wait_for_selector("[data-node-name='node-a'] .badge.status-draining")
    [(state,)] = stack.query("SELECT state FROM nodes_node WHERE hostname='node-a'")
    assert state == "draining" and questions and questions[0].startswith("Drain node-a?")
    assert stack.query("SELECT count(*) FROM audit_auditevent WHERE action='node.draining' AND actor_label='admin'")[0][0] == 1
    screenshot(page, "nodes-admin-draining")
    page.locator("[data-node-name='node-a']").get_by_role("button", name="Undrain").click()
    page.wait_for_selector("[data-node-name='node-a'] .badge.status-busy")
    assert stack.query("SELECT state FROM nodes_node WHERE hostname='node-a'") == [("ready",)]
    stack.stop("node-a", signal.SIGKILL)  # its job dies with it; nothing left to drain at teardown
