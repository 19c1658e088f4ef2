"""Preemption end to end, with real processes: a web server, a Celery worker running the
scheduler, two agents with one slot each, and real PyTorch jobs (recipes.digits_classifier).

bob (team nlp, guaranteed 0 devices in pool local, may borrow 2) fills both slots with low,
preemptible runs; alice's urgent run arrives; the scheduler preempts one low run, which
checkpoints on SIGTERM, goes back in line with its reason shown on the queue API, and later
resumes from its checkpoint and succeeds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.agents.helpers import assert_resumes_after_preemption, run_row, start_agent
from tests.fixtures.live import LiveStack
from tests.runs.live_helpers import TAGS, recipe_stack  # noqa: F401 - fixture

# The low run not chosen must still hold its slot after the urgent one finished, so the victim
# waits in the queue for the whole urgent run (a window of seconds, which the test polls). 2,000
# steps took ~4 s here, so the other low run sometimes ended as the victim stopped and the victim
# went straight back to the freed slot, never seen in the queue; 8,000 steps take ~16 s alone.
LOW = {"steps": 8000, "eval_every": 1000, "batch_size": 32, "hidden": 32, "warmup_steps": 2}
URGENT = {"steps": 300, "eval_every": 100, "batch_size": 32, "hidden": 32, "warmup_steps": 2}
CHECKPOINT_POLICY = {"every_steps": 50, "every_seconds": 0, "keep_last": 2}


def set_borrow_limit(stack: LiveStack, finance: str, borrow_limit: int) -> None:
    """nlp's quota in pool local (the seed's; guaranteed 0), through the finance API. Not a
    `manage.py shell`: under load one took 10 s, most of it after its change, while the low runs
    it let start trained towards their end before the urgent run was submitted."""
    data = stack.api("GET", "/api/v1/finance/quotas/", token=finance)
    quota = next(q["id"] for q in data["results"] if q["team"] == "nlp" and q["pool"] == "local")
    stack.api("PATCH", f"/api/v1/finance/quotas/{quota}/", {"guaranteed_devices": 0, "borrow_limit": borrow_limit},
              token=finance, expect=200)


def submit(stack: LiveStack, token: str, project: str, params: dict[str, Any], priority: str) -> int:
    body = {"project": project, "template": "digits-classifier", "params": params, "tags": TAGS, "priority": priority,
            "resources": {"pool": "local", "max_runtime_s": 600}}
    return int(stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)["id"])


def queue_entries(stack: LiveStack, token: str) -> list[dict[str, Any]]:
    data = stack.api("GET", "/api/v1/queue/?pool=local", token=token)
    return list(data["pools"][0]["queue"])


@pytest.mark.live
@pytest.mark.process
@pytest.mark.timeout(600)  # the 240 s resume wait comes after two trainings
def test_urgent_run_preempts_low_run_which_resumes_from_checkpoint(recipe_stack: LiveStack) -> None:  # noqa: F811
    stack = recipe_stack
    bob, alice, carol = stack.token("bob"), stack.token("alice"), stack.token("carol")
    # bob's team may borrow nothing until both agents are up, so that both low runs start together.
    # Without this gate the first agent to register took the low runs: under load each agent's
    # join token (a manage.py) took 10-13 s, and the second agent came up 8-24 s after the first.
    # A low run (~12 s there) had then either finished before the other started, so "both low
    # runs training" never held, or it ended as the urgent run arrived: the urgent run took its
    # slot and the victim went straight back to its own, never seen in the queue.
    set_borrow_limit(stack, carol, 0)
    low = [submit(stack, bob, "nlp/tiny-lm", LOW, "low") for _ in range(2)]
    for run_id in low:
        # No agent yet, so nothing has claimed them: checkpoint every few steps for a cheap preemption.
        stack.query("UPDATE runs_run SET checkpoint_policy=? WHERE id=?", (json.dumps(CHECKPOINT_POLICY), run_id))
    # The submissions ask for a pass (a Celery task): the reason appears once the worker ran it.
    waiting = stack.wait_for(lambda: (q := queue_entries(stack, bob)) and q[0]["reason"]["code"] and q, 30, "a pass over the queue")
    assert [e["run"]["id"] for e in waiting] == low and waiting[0]["reason"]["code"] == "unknown_pool"

    start_agent(stack, "a1")
    start_agent(stack, "a2")
    stack.wait_for(lambda: stack.query("SELECT COUNT(*) FROM nodes_node WHERE state='ready'")[0][0] == 2, 60,
                   "both agents to register")
    # Then 2 devices: the next pass (the beat's, every 10 s) places both low runs at once.
    set_borrow_limit(stack, carol, 2)
    stack.wait_for(lambda: all((row := run_row(stack, r))["status"] == "running" and row["steps_done"] > 0 for r in low),
                   90, "both low runs to be training")

    urgent = submit(stack, alice, "vision/digits", URGENT, "urgent")
    preempted = stack.wait_for(
        lambda: stack.query("SELECT run_id FROM runs_attempt WHERE status='preempted' AND run_id IN (?, ?)", tuple(low)),
        30, "a low run to be preempted")
    victim = int(preempted[0][0])
    assert len(preempted) == 1, "one slot is enough for the urgent run"
    # While it waited, the urgent run's reason was recorded: it was stopping a lower-priority run.
    reasons = {r[0] for r in stack.query("SELECT reason_code FROM scheduling_queueestimate WHERE run_id=?", (urgent,))}
    assert "preempting" in reasons, reasons
    actors = stack.query("SELECT actor_label FROM audit_auditevent WHERE action='run.preempt' AND object_id=?", (str(victim),))
    assert actors == [("scheduler",)]

    def victim_waiting() -> Any:
        mine = [e for e in queue_entries(stack, bob) if e["run"] and e["run"]["id"] == victim]
        if not mine:
            return None
        theirs = [e for e in queue_entries(stack, alice) if e["team"] == "nlp"]
        return mine[0], theirs

    entry, seen_by_alice = stack.wait_for(victim_waiting, 30, "the preempted run back in the queue", interval=0.2)
    assert entry["reason"]["message"] and entry["priority"] == "low"
    assert entry["reason"]["code"] in {"preempted", "waiting_for_resources", "behind_higher_priority", "behind_earlier_jobs"}
    assert seen_by_alice and all(e["run"] is None for e in seen_by_alice), "alice sees nlp's run without its details"
    row = run_row(stack, victim)
    assert row["status"] in {"queued", "scheduled", "running"}

    stack.wait_for(lambda: run_row(stack, urgent)["status"] == "succeeded", 60, "the urgent run to succeed")
    assert_resumes_after_preemption(stack, victim, 240)  # a whole training under CI load

