"""The run page's Checkpoints card in Chromium marks the checkpoint kept as the best under the
run's checkpoint_policy.keep_best (issue 29, item 7i), says its rule, and its retention note says
the best is kept beside the last K. Django's live_server; the run and its checkpoints are made
through the services the agent's reports call. Screenshot test-artifacts/run-checkpoints-best.png.
tests/tracking/test_checkpoint_best.py has the rules."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import screenshot
from tests.tracking.test_checkpoint_best import make_checkpointed_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_checkpoints_card_marks_the_best_kept_beside_the_last_k(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    run, _ = make_checkpointed_run(cast.digits, policy={"every_steps": 100, "keep_last": 2, "keep_best": "val_loss:min"},
                                   deleted=(100, 300, 400))
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    card = page.locator("#checkpoints-card")
    card.scroll_into_view_if_needed()
    rows = card.locator("#checkpoint-rows tr")
    assert [rows.nth(i).get_attribute("data-step") for i in range(rows.count())] == ["200", "500", "600"]
    best = card.locator("tr[data-best]")
    assert best.count() == 1 and best.get_attribute("data-step") == "200"
    badge = best.locator(".badge.best-badge")
    assert badge.is_visible() and badge.inner_text().strip().lower() == "best"
    assert best.locator(".keep-rule").inner_text() == "kept as best: lowest val_loss"
    assert "val_loss=0.41" in best.inner_text()
    assert card.locator("#checkpoint-retention").inner_text() == (
        "Retention keeps the last 2 checkpoints and, beside them, the best: the one with the lowest val_loss.")
    # Unfolding the deleted ones (the card is read again from the server) keeps the mark.
    card.locator("#deleted-checkpoints summary").click()
    page.wait_for_selector("#deleted-checkpoint-rows tr[data-step='100']", timeout=30_000)
    assert page.locator("#checkpoints-card tr[data-best]").count() == 1
    assert page.locator("#deleted-checkpoint-rows tr[data-best]").count() == 0
    page.locator("#checkpoints-card").scroll_into_view_if_needed()
    screenshot(page, "run-checkpoints-best")
