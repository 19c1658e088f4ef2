"""Least attained service (`Policy.demote_after_s`) on small hand-made clusters.

A run that has run longer than the pool's threshold, over all its attempts, is demoted: new
jobs may preempt it beyond its team's guarantee, and waiting demoted jobs go behind every other
job, least service first, at levels that deepen with each further factor of service.
"""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import (
    Policy,
    PreemptionKind,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
    WaitCode,
    explain_policy,
    queue_order,
    schedule,
)
from apps.scheduling.estimate import queue_estimates
from apps.scheduling.model import Ordering
from apps.scheduling.policies import running_standings, runs_within_guarantee, service_level
from tests.scheduling.test_core import POOL, entry, job, node, placed, run, state

N, U, L = PriorityClass.NORMAL, PriorityClass.URGENT, PriorityClass.LOW
HOUR = 3600.0
NOW = 100 * HOUR
# nlp has no guarantee here, so every run of its is borrowed and may be preempted.
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=8), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))


def long_run(run_id: str = "old", *, hours: float = 2.0, attained: float = 0.0, **kw: object) -> RunningJob:
    """A run on the whole of node n1 that started `hours` ago (plus `attained` seconds before)."""
    base = run(run_id, (("n1", 8),), started=NOW - hours * HOUR, end=NOW + 50 * HOUR, **kw)  # type: ignore[arg-type]
    return replace(base, attained_s=attained)


def fresh(job_id: str = "new", **kw: object) -> QueuedJob:
    return job(job_id, devices=8, submitted=NOW - 60, **kw)  # type: ignore[arg-type]


def test_a_new_job_preempts_a_run_demoted_after_the_threshold() -> None:
    decision = schedule(state([node("n1", 0)], [fresh(team="vision")], [long_run()], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in decision.preemptions] == ["old"]
    reason = decision.preemptions[0].reason
    assert decision.preemptions[0].kind == PreemptionKind.DEMOTED
    assert reason.startswith("demoted: run old (team nlp) has run for 2 h in all, more than pool a100's 1 h")
    assert "new job new" in reason and "latest checkpoint" in reason
    assert entry(decision, "new").code == WaitCode.PREEMPTING
    assert "that have run longer than it" in entry(decision, "new").message


def test_a_run_below_the_threshold_keeps_its_devices() -> None:
    decision = schedule(state([node("n1", 0)], [fresh()], [long_run(hours=0.5)], now=NOW, quotas=QUOTAS))
    assert decision.preemptions == ()
    assert entry(decision, "new").code != WaitCode.PREEMPTING


def test_demotion_never_reaches_inside_a_guarantee_non_preemptible_or_urgent_runs() -> None:
    guaranteed = (TeamQuota(team="nlp", pool=POOL, guaranteed_devices=8),)
    for running, quotas in (
        (long_run(hours=30), guaranteed),
        (long_run(hours=30, preemptible=False), QUOTAS),
        (long_run(hours=30, klass=U), QUOTAS),
    ):
        decision = schedule(state([node("n1", 0)], [fresh(team="vision")], [running], now=NOW, quotas=quotas))
        assert decision.preemptions == (), running


def test_attained_service_counts_earlier_attempts_and_a_resume_gets_its_minimum() -> None:
    # 50 minutes in earlier attempts plus 20 in this one: demoted, but only just resumed.
    resumed = long_run(hours=20 / 60, attained=50 * 60)
    assert resumed.service(NOW) == 70 * 60
    decision = schedule(state([node("n1", 0)], [fresh()], [resumed], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in decision.preemptions] == ["old"]  # past its first 15 minutes
    assert "has run for 1 h 10 min in all" in decision.preemptions[0].reason
    policy = Policy(demoted_min_attempt_s=30 * 60)
    held_back = schedule(state([node("n1", 0)], [fresh()], [resumed], now=NOW, quotas=QUOTAS, policy=policy))
    assert held_back.preemptions == ()


def test_urgent_jobs_still_preempt_a_run_in_its_minimum_attempt() -> None:
    resumed = long_run(hours=5 / 60, attained=3 * HOUR, klass=L)
    decision = schedule(state([node("n1", 0)], [fresh(klass=U)], [resumed], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in decision.preemptions] == ["old"]
    assert decision.preemptions[0].reason.startswith("lower class")
    assert decision.preemptions[0].kind == PreemptionKind.LOWER_CLASS


def test_waiting_demoted_jobs_go_last_least_service_first_and_never_age() -> None:
    queued = [
        replace(job("ran-2h", submitted=0.0), attained_s=2 * HOUR),
        replace(job("ran-70m", submitted=10.0), attained_s=70 * 60),
        job("low-never-ran", klass=L, submitted=NOW - 60),
        job("normal-new", submitted=NOW - 30),
        replace(job("ran-30m", submitted=5.0), attained_s=30 * 60),
    ]
    order = [j.id for j in queue_order(state([node("n1", 0)], queued, now=NOW, quotas=QUOTAS))[POOL]]
    # Normal jobs that have not been demoted, then demoted normal ones (least service first),
    # then low ones: a class outweighs service.
    assert order == ["ran-30m", "normal-new", "ran-70m", "ran-2h", "low-never-ran"]
    # A demoted low job submitted long ago is not promoted by aging (it ran; it is not starving).
    old_low = replace(job("old-low", klass=L, submitted=0.0), attained_s=2 * HOUR)
    fresh_low = job("fresh-low", klass=L, submitted=NOW - 60)
    aged = [j.id for j in queue_order(state([node("n1", 0)], [old_low, fresh_low], now=NOW, quotas=QUOTAS))[POOL]]
    assert aged == ["fresh-low", "old-low"]


def test_a_low_job_never_stops_a_demoted_normal_run_but_stops_a_demoted_low_one() -> None:
    decision = schedule(state([node("n1", 0)], [fresh(klass=L)], [long_run(hours=30)], now=NOW, quotas=QUOTAS))
    assert decision.preemptions == ()
    decision = schedule(state([node("n1", 0)], [fresh(klass=L)], [long_run(hours=30, klass=L)], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in decision.preemptions] == ["old"]
    assert decision.preemptions[0].reason.startswith("demoted: run old")


def test_a_demoted_job_waits_with_its_own_reason() -> None:
    waiting = replace(job("back", submitted=0.0), attained_s=3 * HOUR + 10 * 60)
    decision = schedule(state([node("n1", 0)], [fresh("first"), waiting], [long_run(hours=0.1)], now=NOW, quotas=QUOTAS))
    reason = entry(decision, "back")
    assert reason.code == WaitCode.DEMOTED
    assert reason.message.startswith("It has run for 3 h 10 min in all, more than pool a100's 1 h")


def test_service_levels_deepen_by_the_factor() -> None:
    policy = Policy(demote_after_s=HOUR, demotion_factor=4.0)
    assert [service_level(h * HOUR, policy) for h in (0.5, 1, 3.9, 4, 15, 16, 64)] == [0, 1, 1, 2, 2, 3, 4]
    assert service_level(1000 * HOUR, Policy(demotion_factor=1.0)) == 1
    assert service_level(1000 * HOUR, Policy(demote_after_s=0)) == 0
    assert service_level(1000 * HOUR, Policy(ordering=Ordering.FIFO)) == 0


def test_a_waiting_demoted_job_preempts_runs_demoted_deeper_but_not_its_level() -> None:
    waiting = replace(job("gang", devices=8, team="vision", submitted=0.0), attained_s=1.5 * HOUR)
    deeper = long_run(hours=10)  # level 2 (4 h to 16 h)
    same = long_run(hours=3)  # level 1, like the waiting job
    decision = schedule(state([node("n1", 0)], [waiting], [deeper], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in decision.preemptions] == ["old"]
    assert "job gang, which has run for 1 h 30 min" in decision.preemptions[0].reason
    decision = schedule(state([node("n1", 0)], [waiting], [same], now=NOW, quotas=QUOTAS))
    assert decision.preemptions == ()


def test_turned_off_it_is_the_plain_class_rule() -> None:
    policy = Policy(demote_after_s=0)
    decision = schedule(state([node("n1", 0)], [fresh()], [long_run(hours=30)], now=NOW, quotas=QUOTAS, policy=policy))
    assert decision.preemptions == ()
    assert not any("demoted" in rule for rule in explain_policy(policy))
    assert any("has run for 1 h in all is demoted" in rule for rule in explain_policy(Policy()))


def test_a_teams_guarantee_protects_its_undemoted_runs_first() -> None:
    young = run("young", (("n1", 4),), team="nlp", started=NOW - 600)
    old = run("old", (("n2", 4),), team="nlp", started=NOW - 5 * HOUR)
    standings = running_standings([young, old], NOW, Policy())
    assert standings["young"] > standings["old"]
    # Started first, the old run would fill the guarantee by start time alone.
    assert runs_within_guarantee([young, old], {"nlp": 4}, standings) == {"young": True, "old": False}
    assert runs_within_guarantee([young, old], {"nlp": 4}) == {"young": False, "old": True}


def test_the_estimate_of_a_job_that_preempts_is_its_victims_exit() -> None:
    s = state([node("n1", 0)], [fresh()], [long_run()], now=NOW, quotas=QUOTAS)
    estimate = queue_estimates(s)["new"]
    assert estimate.start == NOW
    # Once its victim is stopping, the replay has it start when the victim has exited.
    stopping = replace(long_run(), stopping=True, predicted_end=NOW + 30)
    after = queue_estimates(state([node("n1", 0)], [fresh()], [stopping], now=NOW, quotas=QUOTAS))["new"]
    assert after.start == NOW + 30
    assert placed(schedule(state([node("n1", 8)], [fresh()], now=NOW + 30, quotas=QUOTAS)))


def test_devices_stopping_for_a_job_are_its_own_against_jobs_ahead_of_it() -> None:
    # n1's run stops for "first"; "jumper" (shorter, so ahead in line) may not take those devices
    # for nothing: it stops a run of its own on n2 and "first" keeps n1. Unclaimed, "first" lost
    # n1 to it and stopped n2's run in a second round.
    going = replace(long_run(), stopping=True, stopping_for="first", predicted_end=NOW + 30)
    other = run("other", (("n2", 8),), started=NOW - 2 * HOUR, end=NOW + 50 * HOUR)
    queue = [job("first", devices=8, submitted=NOW - 60, runtime=20 * HOUR),
             job("jumper", devices=4, submitted=NOW - 30, runtime=HOUR)]
    s = state([node("n1", 0), node("n2", 0)], queue, [going, other], now=NOW, quotas=QUOTAS)
    assert queue_order(s)[POOL][0].id == "jumper"
    decision = schedule(s)
    assert [(p.victim_id, p.for_job_id) for p in decision.preemptions] == [("other", "jumper")]
    assert entry(decision, "first").code == WaitCode.PREEMPTING
    # Unclaimed, the stopping run's devices went to the job ahead and "first" stopped "other".
    unclaimed = schedule(replace(s, running=(replace(going, stopping_for=None), other)))
    assert [(p.victim_id, p.for_job_id) for p in unclaimed.preemptions] == [("other", "first")]
    # A job of a higher class may still take them.
    urgent = schedule(replace(s, queued=(*queue[:1], replace(queue[1], priority_class=U))))
    assert [(p.victim_id, p.for_job_id) for p in urgent.preemptions] == [("other", "first")]
