"""Agent-side faults. kill -9 of an agent mid-run (lost, requeued, resumed from the server's
checkpoint) is tests/agents/test_agent_recovery.py::test_kill9_agent_requeues_and_resumes_from_checkpoint;
here: an agent that stops answering briefly (no requeue) and then past the node timeout (lost,
requeued, resumed, the old process killed), and a network partition of one agent past the
timeout (rescheduled on another node; the partitioned agent's stale attempt is fenced and killed)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import (
    TcpProxy,
    alive,
    assert_invariants,
    attempt_node,
    attempts,
    job_file,
    job_pid,
    make_stack,
    metric_steps,
    status,
    steps_done,
    submit,
    wait_status,
)

pytestmark = [pytest.mark.live, pytest.mark.process]
TIMEOUT_S = 4  # node timeout; the beat sweeps every 5 s, so a silent node is lost 4-9 s later


@pytest.fixture
def stack(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveStack]:
    s = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=TIMEOUT_S)
    try:
        s.start_web()
        s.start_worker()
        yield s
    finally:
        s.close()


def test_agent_silent_briefly_then_past_the_timeout(stack: LiveStack, tmp_path: Path) -> None:
    agent = start_agent(stack, "node-a")
    # Long enough (30 s) to outlive both silences: a node is lost a timeout plus up to a sweep and
    # a web pulse after its last heartbeat (README "When is a node lost?").
    steps = 600
    run = submit(stack, job_file(tmp_path), steps=steps, delay=0.05, every=20)
    wait_status(stack, run, {"running"}, 60)
    pid1 = job_pid(stack, "node-a", run, 1)

    # Silent for less than the timeout: nothing is requeued, the job never stops.
    agent.send_signal(signal.SIGSTOP)
    time.sleep(TIMEOUT_S - 2)
    agent.send_signal(signal.SIGCONT)
    before = steps_done(stack, run)
    stack.wait_for(lambda: steps_done(stack, run) > before, 20, "progress after the brief silence")
    assert alive(pid1) and attempts(stack, run) == [(1, "running")] and status(stack, run) == "running"
    assert not stack.query("SELECT count(*) FROM audit_auditevent WHERE action='node.lost'")[0][0]

    # Silent past the timeout: lost, requeued; when the agent wakes, its old process is killed
    # and the run resumes from its latest checkpoint as attempt 2.
    stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != ''",
                                       (run,))[0][0], 30, "a stored checkpoint")
    agent.send_signal(signal.SIGSTOP)
    try:
        stack.wait_for(lambda: attempts(stack, run)[0][1] == "lost", TIMEOUT_S + 15, "attempt 1 to be lost")
        assert alive(pid1), "the job keeps training while its agent is silent"
    finally:
        agent.send_signal(signal.SIGCONT)
    stack.wait_for(lambda: not alive(pid1), 20, "the stale attempt's process to be killed")
    assert wait_status(stack, run, {"succeeded", "failed", "cancelled"}, 120) == "succeeded"
    rows = attempts(stack, run)
    assert rows[0] == (1, "lost") and rows[-1][1] == "succeeded" and len(rows) == 2, rows
    logs = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run,)))
    assert "resumed from step" in logs
    assert_invariants(stack, [run], steps={run: steps})


def test_partitioned_agent_is_fenced_and_its_attempt_killed(stack: LiveStack, tmp_path: Path) -> None:
    proxy = TcpProxy(stack.port)
    try:
        # node-a reaches the server only through the proxy; node-b directly.
        start_agent(stack, "node-a", extra=["--server", proxy.url])
        stack.wait_for(lambda: stack.query("SELECT count(*) FROM nodes_node WHERE state='ready'")[0][0] == 1, 30, "node-a")
        steps = 700  # 35 s: it must outlive the partition's detection, the retry backoff and the new placement
        markers = tmp_path / "markers"
        markers.mkdir()
        run = submit(stack, job_file(tmp_path), steps=steps, delay=0.05, every=20, marker=markers)
        wait_status(stack, run, {"running"}, 60)
        assert attempt_node(stack, run, 1) == "node-a"
        pid1 = job_pid(stack, "node-a", run, 1)
        start_agent(stack, "node-b")
        stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != ''",
                                           (run,))[0][0], 30, "a stored checkpoint")

        proxy.cut()
        stack.wait_for(lambda: len(attempts(stack, run)) >= 2 and attempt_node(stack, run, 2) == "node-b", TIMEOUT_S + 20,
                       "the run to be rescheduled on node-b")
        assert attempts(stack, run)[0] == (1, "lost")
        assert alive(pid1), "the partitioned node keeps its job running until it hears back"
        wait_status(stack, run, {"running"}, 30)

        proxy.mend()
        # Back in touch: its reports for attempt 1 are refused (409) and it kills the process.
        stack.wait_for(lambda: not alive(pid1), 30, "the stale attempt on node-a to be killed")
        assert wait_status(stack, run, {"succeeded", "failed", "cancelled"}, 120) == "succeeded"
        done = sorted(p.name for p in markers.iterdir())
        assert done == [f"done-{run}-a2"], f"only attempt 2 may run to completion, got {done}"
        rows = attempts(stack, run)
        assert [s for _, s in rows] == ["lost", "succeeded"], rows
        assert stack.query("SELECT state FROM nodes_node WHERE hostname='node-a'")[0][0] == "ready"
        assert metric_steps(stack, run) == list(range(steps))
        assert_invariants(stack, [run], steps={run: steps})
    finally:
        proxy.close()
