"""The model page in Chromium: versions with stage badges, evidence and cost; Promote puts v2 in
production on its evaluate run, Rollback brings v1 back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

ROOT = Path(__file__).resolve().parents[2]


def test_model_page_promotes_and_rolls_back(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "registry" / "page_setup.py").read_text())
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    login(page, live_stack, "alice")
    page.goto(f"{live_stack.url}/models/{ids['model']}/")
    assert page.inner_text("#version-1 .badge") == "production"
    assert page.inner_text("#version-2 .badge") == "candidate"
    assert "$3.40" in page.inner_text("#version-2")

    page.click("#promote-3")  # below the bar: refused, naming the figure
    assert "val_accuracy >= 0.9 (got 0.81)" in page.inner_text("main")
    page.click("#promote-2")
    assert page.inner_text("#version-2 .badge") == "production"
    assert page.inner_text("#version-1 .badge") == "archived"
    assert "Roll back to v1" in page.inner_text("#model-summary")
    screenshot(page, "registry-model-page")

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#rollback")
    page.wait_for_selector("#version-1 .badge:text('production')")
    assert page.inner_text("#version-2 .badge") == "archived"
