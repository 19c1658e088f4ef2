"""Restarts are for failures that may not recur. A job that exits with its own error fails at
once (retrying a bad config only burns restarts); a job killed from outside with SIGKILL (the
OOM killer; exit 137 from a wrapper shell) is retried, and an OOM loop stops at max restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import assert_invariants, attempts, make_stack, submit, wait_status

pytestmark = [pytest.mark.live, pytest.mark.process]

BAD_CONFIG = "python -c \"import sys; print('config error: lr must be > 0', flush=True); sys.exit(3)\""
OOM_SIGKILL = "python -c \"import os, signal; print('allocating', flush=True); os.kill(os.getpid(), signal.SIGKILL)\""
OOM_137 = "python -c \"import sys; print('Killed', flush=True); sys.exit(137)\""


def _reason(stack: LiveStack, run: int) -> tuple[str, int, str]:
    status, restarts, reason = stack.query("SELECT status, restarts, status_reason FROM runs_run WHERE id=?", (run,))[0]
    return str(status), int(restarts), str(reason)


def test_deterministic_failure_fails_at_once_and_oom_loop_stops_at_max_restarts(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_stack(tmp_path, redis_url, monkeypatch)
    try:
        stack.start_web()
        stack.start_worker()
        start_agent(stack, "node-a", extra=["--slots", "2"])
        bad = submit(stack, tmp_path, steps=0, entrypoint=BAD_CONFIG, max_restarts=3)
        oom = submit(stack, tmp_path, steps=0, entrypoint=OOM_SIGKILL, max_restarts=2)
        oom137 = submit(stack, tmp_path, steps=0, entrypoint=OOM_137, max_restarts=1)
        for run in (bad, oom, oom137):
            wait_status(stack, run, {"failed", "succeeded", "cancelled"}, 120)

        status, restarts, reason = _reason(stack, bad)
        assert (status, restarts) == ("failed", 0) and "exit code 3" in reason and "config error" in reason
        assert attempts(stack, bad) == [(1, "failed")]

        status, restarts, reason = _reason(stack, oom)
        assert status == "failed" and "gave up after 2 restarts" in reason, reason
        assert [s for _, s in attempts(stack, oom)] == ["failed"] * 3
        assert [tuple(r) for r in stack.query("SELECT signal, exit_code FROM runs_attempt WHERE run_id=?", (oom,))] == [(9, None)] * 3

        status, restarts, reason = _reason(stack, oom137)
        assert status == "failed" and "gave up after 1 restarts" in reason, reason
        assert len(attempts(stack, oom137)) == 2
        assert_invariants(stack, [bad, oom, oom137])
    finally:
        stack.close()
