"""The run page marks the checkpoint kept as the best under the run's checkpoint_policy.keep_best
(issue 29, item 7i): the selector picks it as the job's SDK keeps it (sdk/trainyard/
_job_checkpoints.py best_record: the best value among the kept ones, NaN never, the latest of
equals), the row has a "best" badge and says the rule, and the retention note says the best is
kept beside the last K. tests/browser/test_run_checkpoints_best.py draws it."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.runs.models import Attempt, Checkpoint, Run, RunStatus
from apps.runs.services.checkpoints import checkpoint_mark_deleted, checkpoint_report
from apps.tracking.downsample import encode
from apps.tracking.selectors import best_checkpoint, checkpoint_overview, checkpoint_retention
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run

pytestmark = pytest.mark.django_db

# step -> val_loss recorded with the checkpoint (None: recorded without metrics, read from the
# run's metric points at that step instead).
LOSSES: dict[int, float | None] = {100: 0.90, 200: 0.41, 300: None, 400: 0.52, 500: 0.60, 600: 0.58}


def make_checkpointed_run(project: Any, *, policy: dict[str, Any], losses: dict[int, float | None] = LOSSES,
                          deleted: tuple[int, ...] = (), points: float = 0.45) -> tuple[Run, dict[int, Checkpoint]]:
    """A finished run with a checkpoint at each step of ``losses``, reported as the agent reports
    them, the steps in ``deleted`` then removed by retention (as the SDK's report does); the
    run's own val_loss point at step 300 is ``points``."""
    run = make_run(project, status=RunStatus.SUCCEEDED, name="best-ckpt", total_steps=600, steps_done=600,
                   checkpoint_policy=policy, finished_at=timezone.now())
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded")
    ckpts = {}
    for step, loss in losses.items():
        metrics = {} if loss is None else {"val_loss": encode(loss), "loss": loss * 1.1}
        ckpts[step] = checkpoint_report(attempt=attempt, sha256=f"{step:064x}", step=step, file_name=f"ckpt-{step}.pt",
                                        size=4096 * step, metrics=metrics)
    metric_points_store(run_id=run.pk, attempt=1, rows=[("val_loss", 300, points, 0, timezone.now().timestamp())])
    for step in deleted:
        assert checkpoint_mark_deleted(attempt=attempt, step=step, file_name=f"ckpt-{step}.pt") == 1
    return run, ckpts


def _card(cast: Any, run: Run) -> str:
    web = Client()
    web.force_login(cast.alice)
    html = web.get(f"/runs/{run.pk}/").content.decode()
    card = html[html.index('id="checkpoints-card"'):]
    return card[:card.index("</details>") if "</details>" in card else card.index("</p>") + 4]


def test_the_policy_is_read_as_the_sdk_reads_it() -> None:
    assert checkpoint_retention({"keep_last": 3, "keep_best": "val_loss:min"}) == {"keep_last": 3, "keep_best": ("val_loss", "min")}
    assert checkpoint_retention({"keep_last": 2, "keep_best": "eval:acc:max"})["keep_best"] == ("eval:acc", "max")
    assert checkpoint_retention({"keep_last": "x", "keep_best": "val_loss"}) == {"keep_last": 0, "keep_best": None}
    assert checkpoint_retention(None) == {"keep_last": 0, "keep_best": None}


def test_the_best_is_the_lowest_or_highest_nan_never_the_latest_of_equals() -> None:
    rows = [{"id": 1, "metrics": {"val_loss": 0.5}}, {"id": 2, "metrics": {"val_loss": "NaN"}},
            {"id": 3, "metrics": {"val_loss": 0.2}}, {"id": 4, "metrics": {"val_loss": 0.2}},
            {"id": 5, "metrics": {"loss": 0.01}}, {"id": 6, "metrics": {"val_loss": "bad"}}]
    assert best_checkpoint(rows, ("val_loss", "min")) == 4
    assert best_checkpoint(rows, ("val_loss", "max")) == 1
    assert best_checkpoint(rows, ("accuracy", "max")) is None
    # Non-finite values as the wire writes them: -inf is the lowest.
    assert best_checkpoint([{"id": 7, "metrics": {"val_loss": encode(-math.inf)}}, {"id": 8, "metrics": {"val_loss": 0.0}}],
                           ("val_loss", "min")) == 7


def test_the_card_marks_the_kept_best_and_says_the_rule(cast: Any) -> None:
    # keep_last 2 with keep_best, as the SDK applies it after each save: step 200 (val_loss 0.41)
    # stays beside the last two all along, so 100, 300 and 400 went; 500 and 600 are the last two.
    run, ckpts = make_checkpointed_run(cast.digits, policy={"every_steps": 100, "keep_last": 2, "keep_best": "val_loss:min"},
                                       deleted=(100, 300, 400))
    overview = checkpoint_overview(run=run)
    assert [c["step"] for c in overview["kept"]] == [200, 500, 600]
    assert overview["best_id"] == ckpts[200].pk
    card = _card(cast, run)
    best = re.findall(r'<tr data-step="(\d+)" class="best-checkpoint" data-best>', card)
    assert best == ["200"], card
    assert card.count(">best</span>") == 1 and "kept as best: lowest val_loss" in card
    assert ('<p class="muted" id="checkpoint-retention">Retention keeps the last 2 checkpoints and, beside them, '
            "the best: the one with the lowest val_loss.</p>") in card
    assert "3 deleted by retention (steps 100–400)" in card


def test_only_the_metrics_recorded_with_a_checkpoint_rank_it(cast: Any) -> None:
    # Step 300's record carried no metrics (the card shows the run's 0.35 at that step): the SDK
    # never ranks it, so it is not the best, though its step's val_loss is the lowest.
    run, ckpts = make_checkpointed_run(cast.digits, policy={"keep_last": 3, "keep_best": "val_loss:min"},
                                       deleted=(100, 400), points=0.35)
    overview = checkpoint_overview(run=run)
    assert [c["step"] for c in overview["kept"]] == [200, 300, 500, 600]
    assert overview["kept"][1]["metrics"] == {"val_loss": 0.35}
    assert overview["best_id"] == ckpts[200].pk


def test_max_rules_and_runs_without_a_best_rule(cast: Any) -> None:
    run, ckpts = make_checkpointed_run(cast.digits, policy={"keep_last": 1, "keep_best": "val_loss:max"}, deleted=(200, 300, 400, 500))
    assert checkpoint_overview(run=run)["best_id"] == ckpts[100].pk
    card = _card(cast, run)
    assert "kept as best: highest val_loss" in card and "Retention keeps the last checkpoint and, beside them," in card
    # Without keep_best, or keeping every checkpoint, nothing is marked and the note says so.
    plain, _ = make_checkpointed_run(cast.digits, policy={"keep_last": 3})
    card = _card(cast, plain)
    assert "data-best" not in card and ">best</span>" not in card and "Retention keeps the last 3 checkpoints.</p>" in card
    every, _ = make_checkpointed_run(cast.digits, policy={"keep_best": "val_loss:min"})
    card = _card(cast, every)
    assert "data-best" not in card and "Retention keeps every checkpoint.</p>" in card


def test_the_api_flags_the_same_best_on_every_page_and_documents_it(cast: Any) -> None:
    run, ckpts = make_checkpointed_run(cast.digits, policy={"every_steps": 100, "keep_last": 2, "keep_best": "val_loss:min"},
                                       deleted=(100, 300, 400))
    api = cast.client(cast.alice)
    url = f"/api/v1/runs/{run.pk}/checkpoints/"
    rows = api.get(url).json()["results"]
    assert [(r["step"], r["best"]) for r in rows] == [(100, False), (200, True), (300, False), (400, False), (500, False),
                                                      (600, False)]
    # A page without the best still knows which it is (no row of it flagged), the page with it flags it.
    assert [r["best"] for r in api.get(url, {"page_size": 2, "page": 3}).json()["results"]] == [False, False]
    assert [r["id"] for r in api.get(url, {"ordering": "-step", "page_size": 5, "page": 1}).json()["results"] if r["best"]] == [
        ckpts[200].pk]
    plain, _ = make_checkpointed_run(cast.digits, policy={"keep_last": 3})
    assert not any(r["best"] for r in api.get(f"/api/v1/runs/{plain.pk}/checkpoints/").json()["results"])
    schema = api.get("/api/schema/", {"format": "json"}).json()
    assert schema["components"]["schemas"]["Checkpoint"]["properties"]["best"]["type"] == "boolean"
