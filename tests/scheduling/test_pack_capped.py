"""Issue 28: runs that reached the preemption cap share nodes (`Policy.pack_capped`), so whole
nodes stay clearable for gangs."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import Policy, TeamQuota, explain_policy, queue_order, schedule
from tests.scheduling.test_core import POOL, job, node, placed, run, state

HOUR = 3600.0
NOW = 100 * HOUR
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))
CAP = Policy(max_preemptions=10)
PACK = replace(CAP, pack_capped=True)
# n1 holds a run stopped 10 times (it will not be stopped again), n2 an ordinary one; n2 is fuller.
NODES = [node("n1", 6), node("n2", 4)]
RUNNING = [
    replace(run("capped", (("n1", 2),), started=NOW - HOUR, end=NOW + 50 * HOUR), preemptions=10),
    run("plain", (("n2", 4),), started=NOW - HOUR, end=NOW + 50 * HOUR),
]


def _where(policy: Policy, waiting: object) -> tuple[tuple[str, int], ...]:
    return placed(schedule(state(NODES, [waiting], RUNNING, now=NOW, quotas=QUOTAS, policy=policy)))[waiting.id]


def test_a_run_at_the_cap_joins_the_node_of_other_capped_runs() -> None:
    capped = replace(job("back", submitted=0.0), attained_s=20 * HOUR, preemptions=10)
    assert _where(CAP, capped) == (("n2", 1),)  # best fit: the fuller node
    assert _where(PACK, capped) == (("n1", 1),)  # packed beside the other immovable run


def test_other_runs_and_capped_ones_that_do_not_fit_there_keep_best_fit() -> None:
    fresh = job("fresh", submitted=NOW - 60)
    assert _where(PACK, fresh) == (("n2", 1),)
    below = replace(job("below", submitted=0.0), attained_s=20 * HOUR, preemptions=9)
    assert _where(PACK, below) == (("n2", 1),)
    wide = replace(job("wide", devices=8, submitted=0.0), attained_s=20 * HOUR, preemptions=10)
    nodes = [node("n1", 6), node("n2", 4), node("n3", 8)]
    decision = schedule(state(nodes, [wide], RUNNING, now=NOW, quotas=QUOTAS, policy=PACK))
    assert placed(decision)["wide"] == (("n3", 8),)


def test_runs_at_the_cap_hold_at_most_their_share_of_the_pool() -> None:
    share = replace(CAP, capped_share=0.5)  # 8 of the pool's 16 devices
    nodes = [node("n1", 2), node("n2", 8)]
    holding = [replace(run("capped", (("n1", 6),), started=NOW - HOUR, end=NOW + 50 * HOUR), preemptions=10)]
    wide = replace(job("wide", devices=4, submitted=0.0), attained_s=20 * HOUR, preemptions=10)
    narrow = replace(job("narrow", devices=2, submitted=HOUR), attained_s=20 * HOUR, preemptions=10)
    fresh = job("fresh", devices=4, submitted=NOW - 60)

    def go(policy: Policy, *waiting: object):
        return schedule(state(nodes, waiting, holding, now=NOW, quotas=QUOTAS, policy=policy))

    assert set(placed(go(CAP, wide))) == {"wide"}  # no share: it starts
    decision = go(share, wide, narrow, fresh)
    assert set(placed(decision)) == {"narrow", "fresh"}  # 6 + 2 fit the share, 6 + 4 would not
    why = {e.job_id: e.message for e in decision.queue}["wide"]
    assert "stopped 10 times" in why and "50%" in why


def test_runs_at_the_cap_go_first_among_the_demoted_but_stand_at_their_level() -> None:
    first = replace(CAP, capped_first=True)
    capped = replace(job("capped", submitted=0.0), attained_s=500 * HOUR, preemptions=10)
    little = replace(job("little", submitted=HOUR), attained_s=2 * HOUR, preemptions=1)
    fresh = job("fresh", submitted=NOW - 60)

    def order(policy: Policy) -> list[str]:
        return [j.id for j in queue_order(state([node("n1", 0)], [capped, little, fresh], now=NOW, quotas=QUOTAS,
                                                policy=policy))[POOL]]

    assert order(CAP) == ["fresh", "little", "capped"]  # least service first
    assert order(first) == ["fresh", "capped", "little"]
    # Waiting first, it still stops no run of less service; the demoted job behind it still may
    # stop a run that has had more service than it.
    deeper = run("deeper", (("n1", 8),), started=NOW - 20 * HOUR, end=NOW + 50 * HOUR)
    decision = schedule(state([node("n1", 0)], [capped, little], [deeper], now=NOW, quotas=QUOTAS, policy=first))
    assert [(p.victim_id, p.for_job_id) for p in decision.preemptions] == [("deeper", "little")]


def test_the_queue_page_explains_the_capped_options() -> None:
    rules = " ".join(explain_policy(replace(CAP, pack_capped=True, capped_share=0.3, capped_first=True)))
    assert "beside one another" in rules and "30% of the pool" in rules and "first among the demoted" in rules
    assert "beside one another" not in " ".join(explain_policy(CAP))
