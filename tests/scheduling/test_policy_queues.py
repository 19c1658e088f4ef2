"""Issue 28: Tiresias' discretized queues (`Policy.demoted_fifo`, `Policy.demotion_levels`), a
starvation guard that only lifts a job in line (`Policy.starved_preempt` off), victims spread over
runs (`Policy.victim_preemption_cost_s`), and device-second service for a 64-device job; and
how a pool's policy JSON is read, checked and, where it is wrong, named on the queue."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from apps.nodes.models import NodePool
from apps.scheduling.core import Policy, TeamQuota, explain_policy, queue_order, schedule
from apps.scheduling.policies import demoted
from apps.scheduling.pool_policy import policy_error, policy_from_json
from apps.scheduling.simulate import run_variants
from apps.scheduling.trace import Variant
from apps.scheduling.trace_replay import POLICIES
from tests.scheduling.test_core import POOL, job, node, run, state
from tests.scheduling.test_service_guards import long_among_short
from tests.scheduling.test_simulate import synthetic, write_trace

HOUR = 3600.0
NOW = 100 * HOUR
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))
# Two queues (one demoted level), FIFO inside each.
QUEUES = Policy(demotion_factor=1.0, demoted_fifo=True)
# ...with the guard that only lifts a starved job in line.
LIFT = replace(QUEUES, starve_factor=4.0, starved_preempt=False)


def _order(policy: Policy, *jobs: object) -> list[str]:
    return [j.id for j in queue_order(state([node("n1", 0)], jobs, now=NOW, quotas=QUOTAS, policy=policy))[POOL]]


def test_demoted_jobs_of_one_queue_go_in_submission_order() -> None:
    older = replace(job("older", submitted=0.0), attained_s=20 * HOUR)
    newer = replace(job("newer", submitted=HOUR), attained_s=2 * HOUR)
    fresh = job("fresh", submitted=NOW - 60)
    assert _order(Policy(demotion_factor=1.0), older, newer, fresh) == ["fresh", "newer", "older"]  # least service
    assert _order(QUEUES, older, newer, fresh) == ["fresh", "older", "newer"]


def test_with_several_levels_fifo_orders_inside_a_level_and_levels_still_preempt() -> None:
    policy = Policy(demoted_fifo=True)  # levels at 1 h, 4 h, 16 h of service
    deep = replace(job("deep", submitted=0.0), attained_s=20 * HOUR)
    shallow_late = replace(job("late", submitted=2 * HOUR), attained_s=2 * HOUR)
    shallow_early = replace(job("early", submitted=HOUR), attained_s=3 * HOUR)
    assert _order(policy, deep, shallow_late, shallow_early) == ["early", "late", "deep"]
    # A waiting level-1 job may stop a level-2 run (its level is read from the key), not a level-1 one.
    waiting = replace(job("gang", devices=8, team="vision", submitted=0.0), attained_s=1.5 * HOUR)
    deeper = run("old", (("n1", 8),), started=NOW - 10 * HOUR, end=NOW + 50 * HOUR)
    same = run("old", (("n1", 8),), started=NOW - 3 * HOUR, end=NOW + 50 * HOUR)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [waiting], [deeper], now=NOW, quotas=QUOTAS,
                                                policy=policy)).preemptions] == ["old"]
    assert schedule(state([node("n1", 0)], [waiting], [same], now=NOW, quotas=QUOTAS, policy=policy)).preemptions == ()


def test_the_deepest_level_holds_every_longer_run() -> None:
    # Levels at 1 h and 4 h of service only: 5 h and 50 h of service stand together.
    waiting = replace(job("gang", devices=8, team="vision", submitted=HOUR), attained_s=5 * HOUR)
    longer = run("old", (("n1", 8),), started=NOW - 50 * HOUR, end=NOW + 50 * HOUR)

    def stopped(policy: Policy) -> list[str]:
        decision = schedule(state([node("n1", 0)], [waiting], [longer], now=NOW, quotas=QUOTAS, policy=policy))
        return [p.victim_id for p in decision.preemptions]

    assert stopped(Policy()) == ["old"]  # levels 2 and 3 without a limit
    assert stopped(Policy(demotion_levels=2)) == []
    # Waiting, with FIFO inside a level, the older of the two resumes first.
    older = replace(job("older", submitted=0.0), attained_s=50 * HOUR)
    assert _order(Policy(demoted_fifo=True), older, waiting) == ["gang", "older"]
    assert _order(Policy(demoted_fifo=True, demotion_levels=2), older, waiting) == ["older", "gang"]
    rules = explain_policy(Policy(demotion_levels=2))
    assert "Jobs that have run 4 h or more stand together" in str(rules)
    assert "stand together" not in str(explain_policy(Policy()))


def test_a_starved_job_regains_its_place_in_line_but_stops_nobody() -> None:
    # Back in line 5 hours after a 1-hour turn: starved (4 x 1 h), so it goes ahead of a newer job.
    back = replace(job("back", devices=8, submitted=0.0), attained_s=3 * HOUR, requeued_at=NOW - 5 * HOUR,
                   last_run_s=HOUR)
    fresh = job("fresh", devices=8, submitted=NOW - 60, runtime=600.0)
    assert _order(LIFT, fresh, back) == ["back", "fresh"]
    recent = replace(back, requeued_at=NOW - 2 * HOUR)
    assert _order(LIFT, fresh, recent) == ["fresh", "back"]
    assert not demoted(back, LIFT, NOW) and demoted(recent, LIFT, NOW)
    victim = run("v", (("n1", 8),), started=NOW - 3 * HOUR, end=NOW + 50 * HOUR)
    # It stops no demoted run (its standing is still its service's), where the preempting guard does...
    alone = schedule(state([node("n1", 0)], [back], [victim], now=NOW, quotas=QUOTAS, policy=LIFT))
    assert alone.preemptions == ()
    preempting = replace(LIFT, starved_preempt=True)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [back], [victim], now=NOW, quotas=QUOTAS,
                                                policy=preempting)).preemptions] == ["v"]
    # ...and a new job behind it in line still may (the walk does not give up at the starved job,
    # which keeps its reservation on n1, where the earliest run ends).
    later = run("v2", (("n2", 8),), started=NOW - 3 * HOUR, end=NOW + 60 * HOUR)
    both = schedule(state([node("n1", 0), node("n2", 0)], [back, fresh], [victim, later], now=NOW, quotas=QUOTAS,
                          policy=LIFT))
    assert [(p.victim_id, p.for_job_id) for p in both.preemptions] == [("v2", "fresh")]


def test_victims_spread_over_runs_stopped_fewer_times() -> None:
    # Two demoted runs, one per node; the one stopped 6 times before loses a little less work now.
    often = replace(run("often", (("n1", 8),), started=NOW - 2 * HOUR + 60, end=NOW + 50 * HOUR), preemptions=6)
    never = run("never", (("n2", 8),), started=NOW - 2 * HOUR, end=NOW + 50 * HOUR)
    new = job("new", devices=8, submitted=NOW - 60, team="vision")
    nodes = [node("n1", 0), node("n2", 0)]

    def victims(policy: Policy) -> list[str]:
        return [p.victim_id for p in schedule(state(nodes, [new], [often, never], now=NOW, quotas=QUOTAS,
                                                    policy=policy)).preemptions]

    assert victims(QUEUES) == ["often"]
    assert victims(replace(QUEUES, victim_preemption_cost_s=HOUR)) == ["never"]


def test_device_seconds_demote_a_64_device_job_64_times_sooner() -> None:
    policy = Policy(service_per_device=True, demote_after_s=4 * HOUR)  # 4 device-hours
    wide = replace(job("wide", devices=8, nodes=8, submitted=0.0), attained_s=5 * 60.0)  # 64 x 5 min = 5.3 device-h
    narrow = replace(job("narrow", devices=1, submitted=0.0), attained_s=3 * HOUR)  # 3 device-hours
    assert demoted(wide, policy) and not demoted(narrow, policy)
    assert not demoted(wide, Policy(demote_after_s=4 * HOUR))  # wall-clock service: 5 minutes
    assert demoted(replace(narrow, attained_s=4 * HOUR), policy)


def test_a_long_job_among_a_stream_of_short_ones_finishes_within_a_bound_and_the_cap() -> None:
    # A steady week of short jobs (10 devices wanted for 8): with the guard that lifts it in line,
    # the 30-hour job finishes within 4 days and is stopped at most 10 times; without, it waits
    # out the whole stream.
    guarded = long_among_short(replace(LIFT, max_preemptions=10))
    assert guarded.preempted <= 10, guarded.preempted
    assert guarded.jct <= 4 * 24 * HOUR, guarded.jct / HOUR
    unguarded = long_among_short(replace(QUEUES, max_preemptions=10))
    assert unguarded.jct > 7 * 24 * HOUR > guarded.jct, (unguarded.jct / HOUR, guarded.jct / HOUR)
    # Bursts with quiet hours between: the cap holds.
    bursts = long_among_short(replace(LIFT, max_preemptions=10), days=5.0, quiet_h=1.0)
    assert bursts.preempted <= 10, bursts.preempted


def test_the_options_are_off_by_default_and_a_pools_json_sets_them() -> None:
    default = Policy()
    assert (default.demoted_fifo, default.starved_preempt, default.victim_preemption_cost_s) == (False, True, 0.0)
    assert default.demotion_levels == 0
    policy = policy_from_json({"demoted_fifo": True, "starved_preempt": False, "victim_preemption_cost_s": 3600,
                               "demotion_levels": 4})
    assert (policy.demoted_fifo, policy.starved_preempt, policy.victim_preemption_cost_s) == (True, False, 3600.0)
    assert policy.demotion_levels == 4
    # 0 says "off" explicitly for the options off by default; a negative value is raised to it.
    off = policy_from_json({"demotion_levels": 0, "max_preemptions": -3, "headroom_devices": 0, "reserve_depth": 0})
    assert (off.demotion_levels, off.max_preemptions, off.headroom_devices) == (0, 0, 0)
    assert off.reserve_depth == 1


def test_variants_replay_the_policy_alone_without_estimates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `simulate --variants --no-estimates`: no estimates made, so no promise kept (`Policy.promise_estimates`):
    # the decisions of a replay with estimates and without promises.
    monkeypatch.setitem(POLICIES, "trainyard", replace(POLICIES["trainyard"], promise_estimates=False))
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(60, seed=2, rate_s=100.0)]
    trace = str(write_trace(tmp_path / "t.csv", rows))
    with_estimates = run_variants(trace, nodes=1, variants=(Variant("trace"),), policies=("trainyard",))
    alone = run_variants(trace, nodes=1, variants=(Variant("trace"),), policies=("trainyard",), estimates=False)
    assert with_estimates["trace"]["trainyard"].estimate_within > 0 == alone["trace"]["trainyard"].estimate_within
    assert alone["trace"]["trainyard"].avg_jct_s == with_estimates["trace"]["trainyard"].avg_jct_s


def test_a_pools_policy_json_is_checked_option_by_option() -> None:
    assert policy_error({}) is None
    assert policy_error({"max_preemptions": 10, "demotion_factor": 2.5, "ordering": "fifo", "demoted_fifo": True}) is None
    assert policy_error({"demotion_levels": 2.5}) == "demotion_levels must be a whole number of at least 0"
    assert policy_error({"reserve_depth": 0}) == "reserve_depth must be a whole number of at least 1"
    assert policy_error({"demote_after_s": float("inf")}) == "demote_after_s must be a number of at least 0"
    assert policy_error({"starve_factor": True}) == "starve_factor must be a number of at least 0"
    assert (policy_error({"zzz": 1}) or "").startswith("unknown scheduler option 'zzz'; known: backfill, capped_first")
    # What the check refuses, the live reading drops, keeping the default.
    assert policy_from_json({"demotion_levels": 2.5, "reserve_depth": 0, "zzz": 1}) == Policy()


def test_settings_the_scheduler_ignores_are_named_on_the_queue(cast: Any) -> None:
    # Stored before saving checked them (or written around the admin): the queue says which
    # settings the scheduler drops, where the rules are, on the page and in the API.
    NodePool.objects.create(name="local", policy={"max_preemption": 10, "demotion_levels": 4, "ordering": "lifo"})
    web = Client()
    web.force_login(cast.alice)
    html = web.get("/queue/").content.decode()
    said = ("Some of pool local&#x27;s policy settings are ignored and the defaults apply instead: unknown scheduler "
            "option &#x27;max_preemption&#x27;; did you mean &#x27;max_preemptions&#x27;?; ordering must be one of "
            "fifo, priority.")
    assert said in html
    rules = cast.client(cast.alice).get("/api/v1/queue/?pool=local").json()["pools"][0]["rules"]
    assert rules[0].startswith("Some of pool local's policy settings are ignored") and "demotion_levels" not in rules[0]
    # The setting that is right still counts: its rule is there.
    assert any("64 h or more stand together" in rule for rule in rules)
    NodePool.objects.filter(name="local").update(policy={"demotion_levels": 4})
    assert "ignored" not in cast.client(cast.alice).get("/api/v1/queue/?pool=local").json()["pools"][0]["rules"][0]


def test_every_option_is_in_the_docs_with_its_default() -> None:
    # docs/pool-policy.md is what the pool admin's help points to: an option missing there, or a
    # default changed here and not there, would mislead whoever sets a pool's JSON.
    text = (Path(__file__).resolve().parents[2] / "docs" / "pool-policy.md").read_text()
    for f in dataclasses.fields(Policy):
        default = f.default
        shown = default.value if isinstance(default, enum.Enum) else json.dumps(default)
        assert f"| `{f.name}` | `{shown}` |" in text, f.name
