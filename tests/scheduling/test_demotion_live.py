"""Least attained service end to end, with real processes: a web server, a Celery worker, one
agent with one slot and real PyTorch jobs (recipes.digits_classifier).

Pool local demotes after 2 seconds here (an hour by default). bob's long normal run is training
past that when alice's short normal run arrives: the scheduler preempts bob's run (same class,
demoted for its service, beyond team nlp's guarantee of 0), which checkpoints on SIGTERM, waits
while alice's run trains, then resumes from its checkpoint and succeeds."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.agents.helpers import assert_resumes_after_preemption, run_row, start_agent
from tests.fixtures.live import LiveStack
from tests.runs.live_helpers import TAGS, recipe_stack  # noqa: F401 - fixture

# Long enough (about 25 s alone here) that it is still training when the short run arrives, on a
# loaded machine too.
LONG = {"steps": 12000, "eval_every": 1000, "batch_size": 32, "hidden": 32, "warmup_steps": 2}
SHORT = {"steps": 300, "eval_every": 100, "batch_size": 32, "hidden": 32, "warmup_steps": 2}
CHECKPOINT_POLICY = {"every_steps": 50, "every_seconds": 0, "keep_last": 2}
SETUP = ("from apps.billing.services import quota_set; from apps.tenants.models import Team; "
         "from apps.nodes.models import NodePool; pool = NodePool.objects.get(name='local'); "
         "pool.policy = {'demote_after_s': 2, 'demoted_min_attempt_s': 1}; pool.save(); "
         "quota_set(team=Team.objects.get(slug='nlp'), pool=pool, guaranteed_devices=0, borrow_limit=1)")


def submit(stack: LiveStack, token: str, project: str, params: dict[str, Any]) -> int:
    body = {"project": project, "template": "digits-classifier", "params": params, "tags": TAGS, "priority": "normal",
            "resources": {"pool": "local", "max_runtime_s": 600}}
    return int(stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)["id"])


@pytest.mark.live
@pytest.mark.process
@pytest.mark.timeout(600)  # the 240 s resume wait comes after two trainings
def test_a_new_run_preempts_a_demoted_run_which_resumes_and_succeeds(recipe_stack: LiveStack) -> None:  # noqa: F811
    stack = recipe_stack
    stack.manage("shell", "-c", SETUP)
    bob, alice = stack.token("bob"), stack.token("alice")
    long = submit(stack, bob, "nlp/tiny-lm", LONG)
    stack.query("UPDATE runs_run SET checkpoint_policy=? WHERE id=?", (json.dumps(CHECKPOINT_POLICY), long))
    start_agent(stack, "a1")
    stack.wait_for(lambda: (row := run_row(stack, long))["status"] == "running" and row["steps_done"] > 200, 60,
                   "the long run to be training")
    # Past the pool's two seconds of service, it is demoted: a new run of the same class may stop it.
    time.sleep(3)
    short = submit(stack, alice, "vision/digits", SHORT)

    preempted = stack.wait_for(
        lambda: stack.query("SELECT 1 FROM runs_attempt WHERE status='preempted' AND run_id=?", (long,)), 30,
        "the demoted run to be preempted")
    assert preempted
    reasons = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in stack.query(
        "SELECT after FROM audit_auditevent WHERE action='run.preempt' AND object_id=?", (str(long),))]
    assert len(reasons) == 1 and reasons[0]["for_run"] == short
    assert "in all, more than the pool's 2 s after which runs that have run less go first" in reasons[0]["reason"]
    assert "resumes from its latest checkpoint" in reasons[0]["reason"]

    assert stack.wait_for(lambda: run_row(stack, short)["status"] == "succeeded", 90, "the new run to succeed")
    assert_resumes_after_preemption(stack, long, 240)  # a whole training under CI load
