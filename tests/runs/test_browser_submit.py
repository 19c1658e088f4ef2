"""alice submits digits-classifier from the form in Chromium and watches it succeed on the run
page, with a real Celery worker and a real agent behind the live server."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.fixtures.browser import login, screenshot
from tests.runs.live_helpers import agent, recipe_stack

__all__ = ["recipe_stack"]
pytestmark = [pytest.mark.browser, pytest.mark.live]


def test_submit_form_to_succeeded_run(recipe_stack: Any, browser_page: Any) -> None:
    stack, page = recipe_stack, browser_page
    agent(stack, "node-a")
    login(page, stack, "alice")
    before = stack.query("SELECT COUNT(*) FROM runs_run")[0][0]  # seed_demo may add demo runs
    check_sweep_cost_follows_the_space(stack, page)
    page.goto(stack.url + "/runs/new/?template=digits-classifier")
    # The form asks the scheduler when the run would start, and asks again when the size changes.
    expected = "document.getElementById('expected-start').textContent"
    page.wait_for_function(f"{expected}.includes('Would ')")
    assert re.search(r"Expected start: Would (start at once|wait: \d+\w\w in line in pool local)", page.inner_text("#expected-start"))
    page.fill("#id_res_devices_per_node", "4")
    page.wait_for_function(f"{expected}.includes('cannot say yet')")
    assert "resources.devices_per_node must be ≤ 1" in page.inner_text("#expected-start")
    page.fill("#id_res_devices_per_node", "1")
    page.wait_for_function(f"{expected}.includes('Would ')")
    # Bad values first: the errors show next to their fields and nothing is queued. grad_accum 3
    # does not divide batch_size 64: the recipe would fail on its first line, so the form refuses it.
    page.fill("#id_p_lr", "5")
    page.fill("#id_p_grad_accum", "3")
    page.click("#submit-run")
    page.wait_for_selector("#submit-errors")
    assert "must be ≤ 1 (got 5)" in page.inner_text("[data-field=p_lr]")
    assert "batch_size (64) must be divisible by world size × grad_accum (1 × 3 = 3" in page.inner_text("[data-field=p_grad_accum]")
    screenshot(page, "runs-submit-error")
    assert stack.query("SELECT COUNT(*) FROM runs_run")[0][0] == before
    page.fill("#id_p_grad_accum", "2")
    page.fill("#id_p_lr", "0.01")
    page.fill("#id_p_steps", "30")
    page.fill("#id_p_eval_every", "10")
    page.fill("#id_p_hidden", "32")
    page.fill("#id_p_warmup_steps", "2")
    page.fill("#id_name", "from the browser")
    screenshot(page, "runs-submit-form")
    page.click("#submit-run")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    # The page follows the run without a reload: status, then its History and Attempts cards.
    ended = "['succeeded', 'failed', 'cancelled'].includes(document.getElementById('run-status').textContent.trim())"
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(ended, timeout=180_000)
    status = page.inner_text("#run-status").strip()
    assert status == "succeeded", f"run {run_id} ended {status!r}\n{stack.log('node-a')[-3000:]}"
    page.wait_for_function("document.getElementById('history-rows').textContent.includes('running → succeeded')", timeout=15_000)
    history = page.inner_text("#history-rows")
    assert "queued → scheduled" in history and "on node-a" in history and "alice" in history, history
    assert "succeeded" in page.inner_text("#attempt-rows") and "node-a" in page.inner_text("#attempt-rows")
    screenshot(page, "runs-submitted-run")

    # The queue page draws its pool's charts without a script error, in whole devices and clock
    # time (a young pool has samples seconds apart: the axis must not count milliseconds).
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(stack.url + "/queue/")
    page.wait_for_selector("[data-chart=utilization] .main-svg")
    page.wait_for_selector("[data-chart=fragmentation] .main-svg")
    ticks = page.eval_on_selector_all("[data-chart] .xtick text", "els => els.map(e => e.textContent)")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks
    devices = page.eval_on_selector_all("[data-chart=fragmentation] .y2tick text", "els => els.map(e => e.textContent)")
    assert devices and len(devices) == len(set(devices)), devices
    screenshot(page, "queue-after-run")
    assert not errors, errors


def check_sweep_cost_follows_the_space(stack: Any, page: Any) -> None:
    """A sweep's cost is its trial count (the server's) times one trial's, and follows the space."""
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(stack.url + "/runs/new/?template=sweep")
    match = re.fullmatch(r"\(4 trials × \$(\d+\.\d\d)\)", page.inner_text("#cost-breakdown").strip())
    assert match, page.inner_text("#cost-breakdown")
    per_trial = float(match.group(1))
    assert page.inner_text("#expected-cost") == f"${4 * per_trial:.2f}"
    assert "4 trials queue one by one" in page.inner_text("#expected-start")
    page.fill("#id_p_space", '{"lr": [0.001, 0.003, 0.01], "hidden": [64, 128]}')
    page.fill("#id_p_max_runs", "6")
    page.wait_for_function("document.getElementById('cost-breakdown').textContent.startsWith('(6 trials')")
    assert page.inner_text("#expected-cost") == f"${6 * per_trial:.2f}" and "6 trials" in page.inner_text("#trial-count")
    page.wait_for_function("!document.getElementById('budget-share').hidden")
    assert "this sweep is at most" in page.inner_text("#budget-share")
    # More points than max_runs: the submission would refuse it, so there is no count to multiply.
    page.fill("#id_p_max_runs", "5")
    page.wait_for_function("!document.getElementById('trials-problem').hidden")
    assert "params.max_runs: the grid has 6 points, more than max_runs 5" in page.inner_text("#trials-problem")
    assert page.inner_text("#expected-cost") == "?" and page.is_hidden("#budget-share")
    screenshot(page, "runs-submit-sweep-cost")
    assert not errors, errors
