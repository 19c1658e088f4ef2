"""The new-run form in Chromium: choosing another template loads its form with what was typed still
there (static/runs/submit.js posts the form with action=reload), the cost and the expected start
follow the form that came back, and it still submits. Without scripts, the "Load template" button
does the same. tests/runs/test_submit_reload_keeps_input.py has the rules case by case."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest

from tests.fixtures.browser import VIEWPORT, login, page_in_new_context, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

START = "document.getElementById('expected-start').textContent"


def _type_into_digits(page: Any) -> None:
    page.fill("#id_name", "typed before the switch")
    page.fill("#id_p_lr", "0.02")
    page.select_option("#id_priority", "low")
    page.fill("#id_res_max_runtime_s", "3600")


def _kept_for_ddp(page: Any) -> None:
    assert page.input_value("#id_template") == "ddp-train"
    assert page.input_value("#id_name") == "typed before the switch"
    assert page.input_value("#id_p_lr") == "0.02"
    assert page.input_value("#id_priority") == "low"
    assert page.input_value("#id_res_max_runtime_s") == "3600"
    # Left at digits-classifier's defaults: ddp-train's own (2 nodes), not digits-classifier's 1.
    assert page.input_value("#id_res_nodes") == "2"
    assert page.input_value("#id_tag_family") == "ddp-train-alice"
    assert page.locator("#submit-errors, .errorlist, [aria-invalid=true]").count() == 0


def test_switching_template_keeps_what_was_typed(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/runs/new/?template=digits-classifier")
    page.wait_for_function(f"!{START}.includes('see the queue')")
    # A parameter the schema refuses is named by the live forecast, never "start at once" (issue 29).
    page.fill("#id_p_lr", "5")
    page.wait_for_function(f"{START}.includes('params.lr')")
    assert "params.lr must be ≤ 1 (got 5)" in page.inner_text("#expected-start") and "at once" not in page.inner_text("#expected-start")
    screenshot(page, "runs-submit-forecast-bad-param")
    _type_into_digits(page)
    page.wait_for_function(f"{START}.includes('Would ')")
    with page.expect_navigation():
        page.select_option("#id_template", "ddp-train")
    _kept_for_ddp(page)
    # The cost is the kept resources' (2 nodes × 1 device × 3600 s), and updates as they change.
    price = Decimal(page.get_attribute("#id_res_pool option:checked", "data-price") or "0")
    assert page.inner_text("#expected-cost") == f"${price * 2:.2f}"
    page.fill("#id_res_nodes", "1")
    assert page.inner_text("#expected-cost") == f"${price:.2f}"
    # The expected start was asked for the reloaded form, with its CSRF token.
    page.wait_for_function(f"!{START}.includes('see the queue')")
    assert "cannot say right now" not in page.inner_text("#expected-start"), page.inner_text("#expected-start")
    screenshot(page, "runs-submit-reloaded")

    page.click("#submit-run")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    name, params, nodes = live_stack.query("SELECT name, params, nodes FROM runs_run WHERE id = ?", (run_id,))[0]
    assert name == "typed before the switch" and nodes == 1
    params = json.loads(params) if isinstance(params, str) else params  # SQLite hands JSON back as text
    assert params["lr"] == 0.02
    assert not errors, errors


def test_without_scripts_the_load_button_keeps_what_was_typed(live_stack: Any, chromium: Any) -> None:
    with page_in_new_context(chromium, viewport=VIEWPORT, java_script_enabled=False) as page:
        login(page, live_stack, "alice")
        page.goto(live_stack.url + "/runs/new/?template=digits-classifier")
        _type_into_digits(page)
        page.select_option("#id_template", "ddp-train")
        with page.expect_navigation():
            page.click("button[name=action][value=reload] >> text=Load template")
        _kept_for_ddp(page)
        # Enter in a field submits the run, as with scripts: the form's first button is a hidden
        # Submit, not a Load button that would only reload the form.
        with page.expect_navigation():
            page.press("#id_name", "Enter")
        assert re.search(r"/runs/\d+/$", page.url), page.url
