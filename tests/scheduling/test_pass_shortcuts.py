"""Shortcuts the core takes for speed decide nothing differently (issue 28's replay time).

`core._dominated` skips planning preemption for a gang at least as large as one that just found
no victims, at a standing no higher. On the golden suite's 800 seeded states, every pass with
it gives the same placements, preemptions and queue as the pass that plans every time, and so
does a replay of a busy slice of the development trace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from apps.scheduling import core
from apps.scheduling.model import ClusterState, Node, Policy, PriorityClass, QueuedJob, RunningJob, WaitCode
from apps.scheduling.trace import TraceJob, load_trace
from apps.scheduling.trace_replay import replay_trace
from tests.scheduling.pass_golden import STATES, random_state

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly-vc-seed0.csv"


def _passes(explain: bool) -> list[Any]:
    out = []
    for seed in range(STATES):
        decision = core.schedule(random_state(seed), explain=explain)
        out.append((decision.placements, decision.preemptions, decision.queue, decision.order))
    return out


@pytest.mark.parametrize("explain", [False, True])
def test_dominated_plans_are_skipped_without_changing_a_decision(monkeypatch: pytest.MonkeyPatch, explain: bool) -> None:
    real: Callable[..., bool] = core._dominated
    fired = 0

    def counting(*args: Any) -> bool:
        nonlocal fired
        skipped = real(*args)
        fired += skipped
        return skipped

    monkeypatch.setattr(core, "_dominated", counting)
    with_shortcut = _passes(explain)
    monkeypatch.setattr(core, "_dominated", lambda *args: False)
    assert _passes(explain) == with_shortcut
    assert fired >= 20  # the shortcut is taken often enough for the comparison to mean something


def test_a_larger_gang_at_no_higher_standing_is_dominated() -> None:
    failed = [((1, 2, 0, 0.0), 997)]
    assert core._dominated((1, 4, 0, 0.0), 997, failed)
    assert core._dominated((2, 2, 0, 0.0), 996, failed)
    assert not core._dominated((1, 1, 0, 0.0), 997, failed)  # smaller: may fit where 2 did not
    assert not core._dominated((1, 4, 0, 0.0), 998, failed)  # stands higher: more victims
    assert not core._dominated((1, 4, 1, 0.0), 997, [((1, 2, 2, 0.0), 997)])  # asks less memory


def _attempts(jobs: list[TraceJob]) -> list[tuple[str, tuple[tuple[float, float], ...], float | None]]:
    _, outcomes = replay_trace(jobs, nodes=6, policy="trainyard")
    return [(o.job.id, o.attempts, o.estimated_start) for o in outcomes]


def test_a_trace_replay_starts_and_stops_the_same_runs_without_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy slice of the development trace on a small cluster: gangs, demoted runs, first claims
    # on stopping runs, and the estimator's replays, all through the same passes.
    jobs = load_trace(TRACE, limit=900)
    with_shortcut = _attempts(jobs)
    monkeypatch.setattr(core, "_dominated", lambda *args: False)
    assert _attempts(jobs) == with_shortcut


NOW = 100_000.0


def _run(run_id: str, node_id: str, devices: int, **kw: Any) -> RunningJob:
    return RunningJob(id=run_id, team="a", pool="p", priority_class=PriorityClass.NORMAL,
                      allocation=((node_id, devices),), started_at=NOW - 3600.0, predicted_end=NOW + 86400.0, **kw)


def _job(job_id: str, nodes: int, devices: int, deadline: float) -> QueuedJob:
    return QueuedJob(id=job_id, team="b", pool="p", priority_class=PriorityClass.NORMAL, submitted_at=NOW - 60.0,
                     nodes=nodes, devices_per_node=devices, predicted_runtime=3600.0, deadline=deadline)


def test_a_failure_while_a_job_has_first_claim_does_not_rule_out_later_gangs() -> None:
    # x finds no room on n1: the stopping run there is c's (first claim). c, a 2-node gang, cannot
    # start; once its turn is over the stopping run's devices are anyone's, so y, larger than x,
    # waits for them rather than being ruled out by x's failure.
    state = ClusterState(
        now=NOW,
        nodes=(Node(id="n1", pool="p", total_devices=8, free_devices=0),
               Node(id="n2", pool="p", total_devices=8, free_devices=0)),
        running=(
            _run("stopping", "n1", 4, stopping=True, stopping_for="c"),
            _run("pinned-1", "n1", 4, preemptible=False),
            _run("pinned-2", "n2", 6, preemptible=False),
            # Demoted but only just resumed: a possible victim for nobody yet. It ends first, so
            # x's reservation (next in line) is on n2.
            replace(_run("resumed", "n2", 2, attained_s=36000.0), started_at=NOW - 60.0, predicted_end=NOW + 30.0),
        ),
        queued=(_job("x", 1, 2, NOW), _job("c", 2, 8, NOW + 1.0), _job("y", 1, 4, NOW + 2.0)),
        policies={"p": Policy()},
    )
    codes = {entry.job_id: entry.code for entry in core.schedule(state).queue}
    assert codes["y"] == WaitCode.PREEMPTING and codes["x"] != WaitCode.PREEMPTING
