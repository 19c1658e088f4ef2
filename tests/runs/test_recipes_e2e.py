"""Every shipped template runs to success through real agents, with metrics, checkpoints and
lineage recorded: digits-classifier, finetune and evaluate from its checkpoint, ddp-train on two
one-slot agents, custom code from an uploaded snapshot, and a sweep of two children."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.fixtures.live import LiveStack
from tests.runs.live_helpers import SMALL, agent, assert_recorded, recipe_stack, submit, upload_snapshot, wait_finished

__all__ = ["recipe_stack"]
pytestmark = [pytest.mark.live]


def test_train_then_finetune_and_evaluate_its_checkpoint(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a", slots=2)
    token = stack.token("alice")
    base = submit(stack, token, "digits-classifier", SMALL)
    done = wait_finished(stack, token, base["id"])
    assert done["status"] == "succeeded", done
    assert done["progress"] == 1.0 and done["lineage"]["template"]["slug"] == "digits-classifier"
    assert_recorded(stack, base["id"])
    step, sha = stack.query("SELECT step, sha256 FROM runs_checkpoint WHERE run_id=? AND deleted_at IS NULL "
                            "ORDER BY step DESC LIMIT 1", (base["id"],))[0]
    latest = {"step": step, "sha256": sha}

    tune = submit(stack, token, "finetune", {"steps": 20, "eval_every": 10, "batch_size": 32, "warmup_steps": 2},
                  init_run=str(base["id"]))
    evaluation = submit(stack, token, "evaluate", {"split": "test"}, init_run=str(base["id"]))
    for run in (tune, evaluation):
        source = run["lineage"]["init_checkpoint"]
        assert (source["run"], source["step"], source["sha256"]) == (base["id"], latest["step"], latest["sha256"])
    tuned = wait_finished(stack, token, tune["id"])
    assert tuned["status"] == "succeeded", tuned
    assert_recorded(stack, tune["id"])
    assert tuned["lineage"]["init_checkpoint"]["run"] == base["id"]
    evaluated = wait_finished(stack, token, evaluation["id"])
    assert evaluated["status"] == "succeeded", evaluated
    assert_recorded(stack, evaluation["id"], checkpoints=False)
    assert evaluated["lineage"]["init_checkpoint"]["sha256"] == latest["sha256"]
    # The jobs' own lineage names the checkpoint file they loaded.
    assert latest["sha256"] in str(tuned["lineage"]) and latest["sha256"] in str(evaluated["lineage"])


@pytest.mark.process
def test_ddp_train_on_two_one_slot_agents(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a")
    agent(stack, "node-b")
    token = stack.token("alice")
    run = submit(stack, token, "ddp-train", SMALL)
    assert (run["resources"]["nodes"], run["resources"]["devices_per_node"]) == (2, 1)
    done = wait_finished(stack, token, run["id"], timeout=240)
    assert done["status"] == "succeeded", done
    assert sorted(done["attempts"][-1]["nodes"]) == ["node-a", "node-b"]
    assert_recorded(stack, run["id"])


CUSTOM_TRAIN = b"""
import trainyard
trainyard.set_total_steps(10)
trainyard.record_lineage(source="custom code e2e")
for step in range(10):
    trainyard.log(step, loss=1.0 / (step + 1))
with trainyard.checkpoint(9, metrics={"loss": 0.1}) as path:
    open(path, "wb").write(b"weights")
print("custom code done")
"""


def _tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(CUSTOM_TRAIN)
        tar.addfile(info, io.BytesIO(CUSTOM_TRAIN))
    return buf.getvalue()


def test_custom_code_from_uploaded_snapshot(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a")
    token = stack.token("alice")
    snapshot = upload_snapshot(stack, token, _tarball(), git_commit="0123456789abcdef")
    run = submit(stack, token, "custom", {"command": "python train.py", "steps": 10}, code_snapshot=snapshot["sha256"])
    done = wait_finished(stack, token, run["id"])
    assert done["status"] == "succeeded", done
    assert done["lineage"]["code_snapshot"] == {"sha256": snapshot["sha256"], "git_commit": "0123456789abcdef"}
    assert_recorded(stack, run["id"])


def test_sweep_of_two_children(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a", slots=2)
    token = stack.token("alice")
    parent = submit(stack, token, "sweep", {"template": "digits-classifier", "strategy": "grid", "space": {"lr": [0.003, 0.01]},
                                            "params": SMALL, "max_runs": 2}, tags={"family": "e2e-sweep"})
    assert len(parent["children"]) == 2
    children = [wait_finished(stack, token, child) for child in parent["children"]]
    assert [c["status"] for c in children] == ["succeeded", "succeeded"]
    for child in children:
        assert child["family"] == "e2e-sweep" and child["parent"] == parent["id"]
        assert_recorded(stack, child["id"])
    rolled = wait_finished(stack, token, parent["id"], timeout=30)
    assert rolled["status"] == "succeeded" and rolled["progress"] == 1.0
    listed = stack.api("GET", "/api/v1/runs/?family=e2e-sweep", token=token)
    assert listed["count"] == 3
