"""Issue 28: service in device-seconds (`Policy.service_per_device`) and a minimum attempt that
grows with each preemption (`Policy.min_attempt_growth`), with the starvation guard."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import Policy, PriorityClass, TeamQuota, WaitCode, explain_policy, queue_order, schedule
from apps.scheduling.policies import demoted, min_attempt, running_standings, service
from tests.scheduling.test_core import POOL, entry, job, node, run, state
from tests.scheduling.test_service_guards import long_among_short

N = PriorityClass.NORMAL
HOUR = 3600.0
NOW = 100 * HOUR
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))
WIDE = Policy(service_per_device=True)
GROWING = Policy(min_attempt_growth=2.0)


def test_device_seconds_demote_a_wide_run_sooner_and_a_narrow_one_as_before() -> None:
    # 20 minutes on 8 devices (past its 15-minute minimum attempt): 160 device-minutes, past the
    # 1-hour threshold, read as device-hours.
    wide = run("wide", (("n1", 8),), started=NOW - 1200, end=NOW + 50 * HOUR)
    new = job("new", devices=8, team="vision", submitted=NOW - 30)
    assert schedule(state([node("n1", 0)], [new], [wide], now=NOW, quotas=QUOTAS)).preemptions == ()
    decision = schedule(state([node("n1", 0)], [new], [wide], now=NOW, quotas=QUOTAS, policy=WIDE))
    assert [p.victim_id for p in decision.preemptions] == ["wide"]
    assert entry(decision, "new").code == WaitCode.PREEMPTING
    # One device: the same seconds, the same standing, either way.
    narrow = run("narrow", (("n1", 1),), started=NOW - 50 * 60, end=NOW + 50 * HOUR)
    assert running_standings([narrow], NOW, WIDE) == running_standings([narrow], NOW, Policy())
    assert service(600.0, 8, WIDE) == 4800.0 and service(600.0, 8, Policy()) == 600.0 == service(600.0, 1, WIDE)


def test_a_waiting_wide_job_is_demoted_by_its_device_seconds() -> None:
    wide = replace(job("wide", devices=8, submitted=0.0), attained_s=20 * 60)  # 160 device-minutes
    narrow = replace(job("narrow", devices=1, submitted=10.0), attained_s=50 * 60)  # 50 device-minutes
    fresh = job("fresh", submitted=NOW - 60)
    assert not demoted(wide, Policy()) and demoted(wide, WIDE) and not demoted(narrow, WIDE)
    order = [j.id for j in queue_order(state([node("n1", 0)], [fresh, wide, narrow], now=NOW, quotas=QUOTAS,
                                             policy=WIDE))[POOL]]
    assert order[-1] == "wide"
    assert entry(schedule(state([node("n1", 0)], [fresh, wide], now=NOW, quotas=QUOTAS, policy=WIDE)),
                 "wide").code == WaitCode.DEMOTED


def test_the_minimum_attempt_doubles_with_each_preemption() -> None:
    assert [min_attempt(n, GROWING) for n in (0, 1, 2, 3)] == [900.0, 1800.0, 3600.0, 7200.0]
    assert min_attempt(5, Policy()) == 900.0  # growth 1, the default: a fixed minimum
    later = Policy(min_attempt_growth=8.0, min_attempt_growth_after=4)
    assert [min_attempt(n, later) for n in (0, 4, 5, 6)] == [900.0, 900.0, 7200.0, 57600.0]
    assert any("8 times as long after each time it is stopped beyond the first 4." in rule
               for rule in explain_policy(later))
    # Demoted (ran 3 h in all), resumed an hour ago: stopped twice before, it may be stopped
    # (minimum 1 h); stopped three times, not yet (minimum 2 h), but still for an urgent job.
    old = replace(run("old", (("n1", 8),), started=NOW - HOUR, end=NOW + 50 * HOUR), attained_s=2 * HOUR)
    new = job("new", devices=8, team="vision", submitted=NOW - 30)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [new], [replace(old, preemptions=2)], now=NOW,
                                                quotas=QUOTAS, policy=GROWING)).preemptions] == ["old"]
    assert schedule(state([node("n1", 0)], [new], [replace(old, preemptions=3)], now=NOW, quotas=QUOTAS,
                          policy=GROWING)).preemptions == ()
    urgent = replace(new, priority_class=PriorityClass.URGENT)
    assert schedule(state([node("n1", 0)], [urgent], [replace(old, preemptions=3)], now=NOW, quotas=QUOTAS,
                          policy=GROWING)).preemptions


def test_growing_turns_bound_how_often_a_long_job_among_short_ones_is_stopped() -> None:
    # Bursts of short jobs with quiet hours between: with a fixed minimum the long job is stopped
    # by every burst; with turns that double it is stopped a few times, and finishes sooner.
    fixed = long_among_short(Policy(), days=5.0, quiet_h=1.0)
    growing = long_among_short(GROWING, days=5.0, quiet_h=1.0)
    assert growing.preempted <= 10 < fixed.preempted, (growing.preempted, fixed.preempted)
    assert growing.jct < fixed.jct, (growing.jct / HOUR, fixed.jct / HOUR)


def test_a_long_job_among_a_stream_of_short_ones_finishes_within_a_bound() -> None:
    # A steady week of short jobs: growing turns and the starvation guard (promoted after
    # waiting 3 x its last turn) bring the 30-hour job home in a bounded time, seldom stopped.
    guarded = long_among_short(Policy(min_attempt_growth=2.0, starve_factor=3.0, service_per_device=True))
    assert guarded.preempted <= 10
    assert guarded.jct <= 4 * 24 * HOUR, guarded.jct / HOUR
    unguarded = long_among_short(Policy())
    assert unguarded.jct > 7 * 24 * HOUR > guarded.jct, (unguarded.jct / HOUR, guarded.jct / HOUR)


def test_a_pools_policy_json_turns_them_on() -> None:
    from apps.scheduling.pool_policy import policy_from_json  # the live scheduler's reading of NodePool.policy

    policy = policy_from_json({"service_per_device": True, "min_attempt_growth": 2, "starve_factor": 3})
    assert (policy.service_per_device, policy.min_attempt_growth, policy.starve_factor) == (True, 2.0, 3.0)
    assert (Policy().service_per_device, Policy().min_attempt_growth) == (False, 1.0)  # off by default
