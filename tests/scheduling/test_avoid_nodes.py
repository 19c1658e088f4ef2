"""The core keeps a requeued run off the nodes suspected of its infrastructure failure while other
nodes could host it, and lists a run waiting out its backoff with its own wait code."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import RETRY_BACKOFF, Placement, WaitCode, schedule
from tests.scheduling.test_core import POOL, job, node, run, state


def test_a_suspect_node_is_avoided_while_another_fits() -> None:
    # Best fit would pick n1 (the tightest); it is the suspect, so n2 takes the run.
    suspect = replace(job("retry", devices=2), avoid_nodes=frozenset({"n1"}))
    d = schedule(state([node("n1", 2), node("n2", 8)], [suspect]))
    assert d.placements == (Placement("retry", POOL, (("n2", 2),)),)


def test_a_suspect_node_is_used_when_no_other_node_could_ever_host_the_run() -> None:
    suspect = replace(job("retry", devices=4), avoid_nodes=frozenset({"n1"}))
    d = schedule(state([node("n1", 8), node("n2", 2, total=2)], [suspect]))
    assert d.placements == (Placement("retry", POOL, (("n1", 4),)),)


def test_avoiding_one_job_neither_fails_its_shape_nor_reserves_the_suspect_node() -> None:
    # n2 frees up at t=1000: the suspect's reservation is there, so n1 takes the next job now.
    suspect = replace(job("retry", devices=8, submitted=0.0), avoid_nodes=frozenset({"n1"}))
    other = job("other", devices=8, submitted=1.0)
    d = schedule(state([node("n1", 8), node("n2", 0)], [suspect, other], running=[run("busy", (("n2", 8),), end=1000.0)]))
    assert [p.job_id for p in d.placements] == ["other"]


def test_a_run_in_its_backoff_waits_with_its_own_code() -> None:
    waiting = replace(job("retry"), blocked_reason=RETRY_BACKOFF, blocked_message="Requeued after an infrastructure failure")
    d = schedule(state([node("n1", 8)], [waiting]), explain=True)
    assert d.placements == ()
    [entry] = [e for e in d.queue if e.job_id == "retry"]
    assert entry.code == WaitCode.RETRY_BACKOFF and entry.message.startswith("Requeued after")
