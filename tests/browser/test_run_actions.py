"""The run page's actions in Chromium (issue 29): Rerun, Clone and edit and Cancel sit together in
the header; notes and tags are edited there and shown; the clone form comes filled in from the
run and submits the user's change. tests/runs/test_run_actions.py has the rules case by case."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

TAGS = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "run-actions"}


def _tags_of(live_stack: Any, run_id: int) -> dict[str, str]:
    tags = live_stack.query("SELECT tags FROM runs_run WHERE id = ?", (run_id,))[0][0]
    return json.loads(tags) if isinstance(tags, str) else tags  # SQLite hands JSON back as text


def _new_run_id(page: Any, old: int) -> int:
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert run_id != old
    return run_id


def test_rerun_clone_cancel_notes_and_tags_from_the_run_page(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    token = live_stack.token("alice")
    # No worker runs in this stack: the run stays queued, so Cancel is offered.
    body = {"project": "vision/digits", "template": "digits-classifier", "name": "wide mlp",
            "params": {"steps": 40, "hidden": 256}, "tags": TAGS, "priority": "low"}
    run = live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)
    login(page, live_stack, "alice")
    page.goto(f"{live_stack.url}/runs/{run['id']}/")

    # A refused save comes back with the form open, what was typed still in it, and the error.
    page.click("#run-annotate summary")
    page.fill("#id_run_notes", "Typed before a refused save.")
    original_tags = page.input_value("#id_run_tags")
    page.fill("#id_run_tags", original_tags + "\nno equals sign")
    with page.expect_navigation():
        page.click("#annotate-save")
    assert page.input_value("#id_run_notes") == "Typed before a refused save."
    assert "key=value" in page.inner_text("#annotate-errors")
    page.fill("#id_run_tags", original_tags)

    # Notes and tags, edited in the header's form.
    page.fill("#id_run_notes", "Wider hidden layer; same seed as the baseline.")
    page.fill("#id_run_tags", page.input_value("#id_run_tags").replace("candidate=baseline", "candidate=candidate")
              + "\nwhy=wider")
    with page.expect_navigation():
        page.click("#annotate-save")
    assert "Notes and tags saved." in page.inner_text(".messages")
    assert page.inner_text("#run-notes") == "Wider hidden layer; same seed as the baseline."
    assert "why=wider" in page.inner_text("main") and "candidate=candidate" in page.inner_text("main")
    assert _tags_of(live_stack, run["id"])["why"] == "wider"

    # The three actions, side by side in the header.
    boxes = [box for sel in ("#rerun-button", "#clone-link", "#cancel-button") if (box := page.locator(sel).bounding_box())]
    assert len(boxes) == 3, boxes
    middles = [box["y"] + box["height"] / 2 for box in boxes]
    assert max(middles) - min(middles) < 6, f"the actions are not on one line: {boxes}"
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    screenshot(page, "run-actions")

    # Clone and edit: the form filled in from the run; one param changed, then submitted.
    page.click("#clone-link")
    page.wait_for_url(re.compile(rf"/runs/new/\?from={run['id']}$"))
    assert page.input_value("#id_name") == "wide mlp"
    assert page.input_value("#id_p_steps") == "40" and page.input_value("#id_p_hidden") == "256"
    assert page.input_value("#id_priority") == "low" and page.input_value("#id_tag_candidate") == "candidate"
    assert f"cloned_from={run['id']}" in page.input_value("#id_extra_tags")
    page.fill("#id_p_hidden", "512")
    screenshot(page, "run-clone-form")
    page.click("#submit-run")
    clone_id = _new_run_id(page, run["id"])
    params = live_stack.query("SELECT params FROM runs_run WHERE id = ?", (clone_id,))[0][0]
    params = json.loads(params) if isinstance(params, str) else params
    assert params["hidden"] == 512 and params["steps"] == 40
    assert _tags_of(live_stack, clone_id)["cloned_from"] == str(run["id"])

    # Rerun: one click, the same submission again, linked by its tag.
    page.goto(f"{live_stack.url}/runs/{run['id']}/")
    page.click("#rerun-button")
    rerun_id = _new_run_id(page, run["id"])
    tags = _tags_of(live_stack, rerun_id)
    assert tags["rerun_of"] == str(run["id"]) and tags["why"] == "wider"
    assert f"rerun_of={run['id']}" in page.inner_text("main")
    assert not errors, errors
