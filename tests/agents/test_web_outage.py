"""Issue 27, acceptance 2: a node is declared lost only on evidence that it is gone.

The web server alone goes down (worker and beat stay up, so the lost-node sweep keeps running)
for far longer than the node timeout: no healthy job is requeued, the same attempts finish, and
every metric arrives once. An agent killed while the web is up is still lost within the timeout
plus 10 s.

The live stack's node timeout is 8 s (TRAINYARD_NODE_TIMEOUT_S), so the 60 s outage is 7.5
timeouts (the issue's was 2) and the long one, TRAINYARD_TEST_LONG_OUTAGE_S (80 s by default), is
10: the same ratio as the issue's 5 minutes to the default 30 s timeout. The sweep's rule
compares durations with the timeout only, so the ratio is what matters; run the issue's own
figure with `TRAINYARD_TEST_LONG_OUTAGE_S=300`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.agents.helpers import kill9, requeue_reasons, start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.process]
LONG_OUTAGE_S = float(os.environ.get("TRAINYARD_TEST_LONG_OUTAGE_S", "80"))

JOB = """
import sys, time, trainyard
steps = int(sys.argv[1])
trainyard.set_total_steps(steps)
for step in range(steps):
    trainyard.log(step, loss=1.0 / (step + 1))
    if step % 50 == 49:
        with trainyard.checkpoint(step) as path:
            open(path, "wb").write(b"step %d" % step)
    time.sleep(0.1)
"""


def node_timeout(stack: LiveStack) -> float:
    return float(stack.env["TRAINYARD_NODE_TIMEOUT_S"])


def two_running(stack: LiveStack, tmp_path: Path, steps: int) -> dict[str, int]:
    """Two agents, one slot each, each running a run that logs a metric every 0.1 s: {node: run}."""
    stack.start_worker()
    agents = {name: start_agent(stack, name, extra=["--slots", "1"]) for name in ("node-a", "node-b")}
    job = write(tmp_path / "job.py", JOB)
    runs = [submit(stack, f"python {job} {steps}") for _ in agents]
    for run in runs:
        wait_status(stack, run, {"running"}, 60)
        stack.wait_for(lambda r=run: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (r,))[0][0] >= 20, 30,
                       f"run {run} to make progress")
    placed = dict(stack.query("SELECT n.hostname, t.run_id FROM runs_assignment a JOIN runs_attempt t ON t.id = a.attempt_id "
                              "JOIN nodes_node n ON n.id = a.node_id WHERE t.run_id IN (?, ?)", tuple(runs)))
    assert sorted(placed) == ["node-a", "node-b"], placed
    return placed


def metric_steps(stack: LiveStack, run: int) -> list[int]:
    return [s for (s,) in stack.query("SELECT step FROM tracking_metricpoint WHERE run_id=? AND key='loss' ORDER BY step", (run,))]


def web_outage(stack: LiveStack, tmp_path: Path, outage_s: float) -> None:
    assert outage_s >= 5 * node_timeout(stack), "the outage must be much longer than the node timeout"
    steps = int((outage_s + 30) * 10)
    runs = two_running(stack, tmp_path, steps)
    stack.stop("web")
    time.sleep(outage_s)
    stack.start_web()
    for run in runs.values():
        row = wait_status(stack, run, {"succeeded", "failed"}, steps / 10 + 120)
        assert row["status"] == "succeeded" and row["restarts"] == 0, row
        assert requeue_reasons(stack, run) == []
        # The attempt that was running through the outage is the one that finished.
        assert stack.query("SELECT number, status FROM runs_attempt WHERE run_id=?", (run,)) == [(1, "succeeded")]
        stack.wait_for(lambda r=run: metric_steps(stack, r) == list(range(steps)), 30, f"every step of run {run} exactly once")
    assert stack.query("SELECT count(*) FROM audit_auditevent WHERE action='node.lost'") == [(0,)]
    assert sorted(stack.query("SELECT hostname, state FROM nodes_node")) == [("node-a", "ready"), ("node-b", "ready")]
    # The sweep ran through the outage and held back on purpose (not merely because it missed it).
    assert "are not declared lost: the web tier" in stack.log("worker")


def test_a_60s_web_outage_requeues_nothing_and_loses_no_metric(live_stack: LiveStack, tmp_path: Path) -> None:
    web_outage(live_stack, tmp_path, 60)


@pytest.mark.timeout(LONG_OUTAGE_S + 300)
def test_a_long_web_outage_requeues_nothing_and_loses_no_metric(live_stack: LiveStack, tmp_path: Path) -> None:
    web_outage(live_stack, tmp_path, LONG_OUTAGE_S)


def test_an_agent_killed_while_the_web_is_up_is_lost_within_the_timeout_plus_10s(live_stack: LiveStack, tmp_path: Path) -> None:
    stack = live_stack
    runs = two_running(stack, tmp_path, 1200)
    kill9(stack.procs["node-a"])
    t0 = time.monotonic()
    limit = node_timeout(stack) + 10
    stack.wait_for(lambda: stack.query("SELECT state FROM nodes_node WHERE hostname='node-a'") == [("lost",)], limit,
                   "node-a to be declared lost")
    assert time.monotonic() - t0 <= limit
    # Declaring the node lost and requeuing its runs are two steps of one sweep.
    stack.wait_for(lambda: requeue_reasons(stack, runs["node-a"]) != [], 10, "node-a's run to go back in line")
    [reason] = requeue_reasons(stack, runs["node-a"])
    assert reason.startswith("node node-a lost (silent past "), reason
    # The other node keeps its job: same attempt, still running.
    assert stack.query("SELECT state FROM nodes_node WHERE hostname='node-b'") == [("ready",)]
    assert stack.query("SELECT number, status FROM runs_attempt WHERE run_id=?", (runs["node-b"],)) == [(1, "running")]
