"""Memory and CPU cores are capacity like devices (issue 24, acceptance 4): the core places a run
only where its memory fits, says "memory" when that is what it waits for, and gives no estimate
to a shape no node could ever hold."""

from __future__ import annotations

from typing import Any

from apps.scheduling.core import schedule
from apps.scheduling.estimate import queue_estimates, unestimated
from apps.scheduling.model import ClusterState, Node, Policy, PriorityClass, QueuedJob, RunningJob, WaitCode

GIB = 2**30


def _job(job_id: str, *, at: float = 0.0, dpn: int = 1, nodes: int = 1, **fields: Any) -> QueuedJob:
    return QueuedJob(id=job_id, team="a", pool="p", priority_class=PriorityClass.NORMAL, submitted_at=at, nodes=nodes,
                     devices_per_node=dpn, predicted_runtime=600.0, **fields)


def _state(*queued: QueuedJob, running: tuple[RunningJob, ...] = (), memory: int = 8 * GIB, cpus: float = 0.0,
           free: int = 2) -> ClusterState:
    return ClusterState(now=10.0, nodes=(Node("n1", "p", 2, free, memory_bytes=memory, cpus=cpus),), running=running,
                        queued=queued, policies={"p": Policy()})


def test_two_runs_of_6_gib_on_a_node_of_8_gib_and_2_devices_do_not_run_together() -> None:
    first, second = _job("1", memory_per_device=6 * GIB), _job("2", at=1.0, memory_per_device=6 * GIB)
    decision = schedule(_state(first, second))
    assert [p.job_id for p in decision.placements] == ["1"]
    waiting = {e.job_id: e for e in decision.queue}["2"]
    assert waiting.code == WaitCode.MEMORY and waiting.code.value == "waiting_for_memory"
    assert "memory" in waiting.message and "6 GiB" in waiting.message and "2 GiB" in waiting.message, waiting.message

    # Next pass, with the first running: the second still waits for memory, reserved for when the first ends.
    running = RunningJob(id="1", team="a", pool="p", priority_class=PriorityClass.NORMAL, allocation=(("n1", 1),),
                         started_at=10.0, predicted_end=610.0, memory_per_device=6 * GIB)
    decision = schedule(_state(second, running=(running,), free=1))
    assert decision.placements == ()
    (entry,) = decision.queue
    assert entry.code == WaitCode.MEMORY and entry.reserved_start == 610.0
    assert queue_estimates(_state(second, running=(running,), free=1))["2"].start == 610.0


def test_without_memory_requests_both_run_together() -> None:
    decision = schedule(_state(_job("1"), _job("2", at=1.0)))
    assert sorted(p.job_id for p in decision.placements) == ["1", "2"]
    # A node that reports no memory limits nobody.
    decision = schedule(_state(_job("1", memory_per_device=6 * GIB), _job("2", at=1.0, memory_per_device=6 * GIB),
                               memory=0))
    assert sorted(p.job_id for p in decision.placements) == ["1", "2"]


def test_runs_that_fit_the_memory_left_run_together() -> None:
    decision = schedule(_state(_job("1", memory_per_device=4 * GIB), _job("2", at=1.0, memory_per_device=3 * GIB)))
    assert sorted(p.job_id for p in decision.placements) == ["1", "2"]


def test_cpu_cores_are_capacity_too() -> None:
    decision = schedule(_state(_job("1", cpus_per_device=3), _job("2", at=1.0, cpus_per_device=2), cpus=4))
    assert [p.job_id for p in decision.placements] == ["1"]
    waiting = {e.job_id: e for e in decision.queue}["2"]
    assert waiting.code == WaitCode.CPUS and "2 CPU cores" in waiting.message, waiting.message


def test_more_memory_than_any_node_has_is_no_such_hardware_without_an_estimate() -> None:
    state = _state(_job("big", memory_per_device=12 * GIB), _job("wide", dpn=2, memory_per_device=5 * GIB))
    entries = {e.job_id: e for e in schedule(state).queue}
    for job_id, need in (("big", "12 GiB"), ("wide", "10 GiB")):
        assert entries[job_id].code == WaitCode.NO_HARDWARE
        assert f"{need} of memory" in entries[job_id].message and "8 GiB" in entries[job_id].message, entries[job_id]
    assert unestimated(state) == {"big", "wide"}
    assert queue_estimates(state)["big"].start is None


def test_a_higher_class_run_preempts_for_the_memory_it_needs_not_only_a_device() -> None:
    low = RunningJob(id="low", team="b", pool="p", priority_class=PriorityClass.LOW, allocation=(("n1", 1),),
                     started_at=0.0, predicted_end=5000.0, memory_per_device=6 * GIB)
    urgent = QueuedJob(id="urgent", team="a", pool="p", priority_class=PriorityClass.URGENT, submitted_at=5.0, nodes=1,
                       devices_per_node=1, predicted_runtime=600.0, memory_per_device=6 * GIB)
    decision = schedule(_state(urgent, running=(low,), free=1))
    assert decision.placements == ()
    assert [p.victim_id for p in decision.preemptions] == ["low"]
    assert {e.job_id: e.code for e in decision.queue}["urgent"] == WaitCode.PREEMPTING
