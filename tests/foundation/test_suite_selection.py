"""Which tests run, and where. CI's SQLite pass runs `--database-only` (tests/conftest.py): a test that uses no database cannot
differ by database, so it runs once, on the PostgreSQL pass. What it keeps and what it drops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ("tests/foundation/test_bootstrap.py", "tests/scheduling/test_core.py", "tests/foundation/test_audit.py",
         "tests/agents/test_agent_recovery.py")


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", *args, *FILES],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_database_only_drops_the_tests_without_a_database_and_keeps_the_rest() -> None:
    everything, kept = _collected(), _collected("--database-only")
    dropped = everything - kept
    assert kept < everything
    # The scheduler's core is pure: none of it is kept.
    assert not {t for t in kept if t.startswith("tests/scheduling/test_core.py")}
    # A test with the db fixture (through the cast) is kept; a pure helper test beside it is not.
    assert "tests/foundation/test_audit.py::test_audit_page_shows_changes_field_by_field" in dropped
    assert any(t.startswith("tests/foundation/test_audit.py") for t in kept)
    # A database outside pytest-django's (marker `database`), and a live stack's, are kept.
    assert "tests/foundation/test_bootstrap.py::test_bootstrap_on_an_empty_database_then_again" in kept
    assert {t for t in everything if t.startswith("tests/agents/test_agent_recovery.py")} <= kept


class _Worker:
    """What xdist's scheduler asks of a worker: the indices of the tests it is sent."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_xdist_keeps_a_shared_group_on_one_worker_and_a_file_whole(request: pytest.FixtureRequest,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The Slurm files share the session's cluster: run side by side, the second one's slurmctld
    clashed with the first's (a preemption test too once: xdist_group marks had stopped working)."""
    monkeypatch.setattr(request.config.option, "dist", "loadgroup", raising=False)
    monkeypatch.setattr(request.config.option, "tx", ["2*popen"], raising=False)
    sched = request.config.hook.pytest_xdist_make_scheduler(config=request.config, log=None)
    ids = [f"tests/slurm/test_cluster.py::test_{n}" for n in range(3)] + \
          [f"tests/a/test_{f}.py::test_{n}" for f in "pqrs" for n in range(2)] + \
          ["tests/slurm/test_slurm_pool.py::test_0", "tests/agents/test_isolation.py::test_0",
           "tests/agents/test_container_live.py::test_0"]
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        sched.add_node(worker)
        sched.add_node_collection(worker, ids)
    sched.schedule()
    while not sched.tests_finished:  # each worker finishes what it was sent, in turn, until none is left
        for worker in workers:
            for index in list(worker.sent):
                if sched.assigned_work[worker][sched._split_scope(ids[index])].get(ids[index]) is False:
                    sched.mark_test_complete(worker, index)
    where = {ids[i]: w.gateway.id for w in workers for i in w.sent}
    assert sorted(where) == sorted(ids)
    assert len({where[i] for i in ids if "/slurm/" in i}) == 1
    assert where["tests/agents/test_isolation.py::test_0"] == where["tests/agents/test_container_live.py::test_0"]
    assert all(where[f"tests/a/test_{f}.py::test_0"] == where[f"tests/a/test_{f}.py::test_1"] for f in "pqrs")
    assert len(set(where.values())) == 2  # and the work was still shared
