"""Ordering rules: aging between classes, guarantees, fair share and the wait ratio.

Pure functions over the model dataclasses; `core.schedule` calls them once per pool per pass.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from apps.scheduling.model import (
    Ordering,
    Packing,
    Policy,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)

HOUR = 3600.0


def decay_usage(device_seconds: float, elapsed_s: float, half_life_s: float) -> float:
    """Decay recorded usage by `elapsed_s` with the given half-life (Slurm's decay)."""
    if half_life_s <= 0:
        return 0.0
    return device_seconds * math.pow(0.5, max(0.0, elapsed_s) / half_life_s)


def accrue_usage(device_seconds: float, devices: float, elapsed_s: float, half_life_s: float) -> float:
    """Decay old usage over `elapsed_s` and add `devices` held throughout, decayed exactly.

    The integral of devices * 2^(-age / half_life) over the interval, so the result does not
    depend on how often the caller updates it.
    """
    if elapsed_s <= 0:
        return device_seconds
    if half_life_s <= 0:
        return 0.0
    kept = math.pow(0.5, elapsed_s / half_life_s)
    return device_seconds * kept + devices * half_life_s / math.log(2.0) * (1.0 - kept)


def fair_share_factors(
    teams: Iterable[str],
    usage: Mapping[str, float],
    guarantees: Mapping[str, int],
) -> dict[str, float]:
    """Slurm's classic factor 2 ** -(usage share / entitled share), in (0, 1].

    A team that used nothing recently gets 1, a team exactly at its entitlement 0.5, and one at
    twice its entitlement 0.25. Entitlement is the team's share of the pool's guarantees, or an
    equal split when the pool has no guarantees at all.
    """
    names = sorted(set(teams))
    if not names:
        return {}
    total_usage = sum(max(0.0, usage.get(t, 0.0)) for t in names)
    total_guaranteed = sum(max(0, guarantees.get(t, 0)) for t in names)
    factors: dict[str, float] = {}
    for team in names:
        if total_usage <= 0:
            factors[team] = 1.0
            continue
        used = max(0.0, usage.get(team, 0.0)) / total_usage
        if total_guaranteed > 0:
            # A team with no guarantee is entitled to a sliver, so its use still counts against it.
            entitled = max(guarantees.get(team, 0), 0.5) / total_guaranteed
        else:
            entitled = 1.0 / len(names)
        factors[team] = math.pow(2.0, -used / entitled)
    return factors


def effective_class(job: QueuedJob, now: float, policy: Policy) -> PriorityClass:
    """Aging between classes: a low job that has waited long enough competes as normal.

    It never climbs to urgent, so urgent keeps meaning "someone decided this is urgent".
    """
    if (
        job.priority_class == PriorityClass.LOW
        and policy.class_promotion_s > 0
        and now - job.submitted_at >= policy.class_promotion_s
    ):
        return PriorityClass.NORMAL
    return job.priority_class


def job_size(job: QueuedJob, policy: Policy) -> float:
    """Predicted device-time, softened: width counts less than length."""
    runtime = max(job.predicted_runtime, policy.min_runtime_s, 1.0)
    return runtime * math.pow(max(job.devices, 1), policy.width_exponent)


def wait_score(job: QueuedJob, now: float, policy: Policy, fair_share: float) -> float:
    """Higher runs first: fair share times (aging * wait + floor) / size.

    With no wait, short narrow jobs lead (shortest-predicted-first lowers mean completion time);
    as a job waits its score grows linearly, so a long job overtakes fresh short ones after
    waiting roughly its own predicted length, and nothing starves.
    """
    wait = max(0.0, now - job.submitted_at)
    ratio = (policy.aging * wait + policy.min_runtime_s) / job_size(job, policy)
    return math.pow(fair_share, policy.fair_share_weight) * ratio


def team_usage_devices(running: Iterable[RunningJob]) -> dict[str, int]:
    held: dict[str, int] = defaultdict(int)
    for run in running:
        held[run.team] += run.devices
    return dict(held)


def runs_within_guarantee(
    running: Sequence[RunningJob], guarantees: Mapping[str, int]
) -> dict[str, bool]:
    """Which runs sit inside their team's guarantee.

    A team's runs fill its guarantee in order of class (highest first) then start time
    (oldest first); whatever spills over is borrowed. This makes the newest, least important
    runs the borrowed ones, so they are the ones preemption may touch.
    """
    by_team: dict[str, list[RunningJob]] = defaultdict(list)
    for run in running:
        by_team[run.team].append(run)
    within: dict[str, bool] = {}
    for team, runs in by_team.items():
        runs.sort(key=lambda r: (-int(r.priority_class), r.started_at, r.id))
        room = guarantees.get(team, 0)
        for run in runs:
            fits = run.devices <= room
            within[run.id] = fits
            if fits:
                room -= run.devices
            else:
                # Once a run spills over, everything after it is borrowed too: a small later run
                # slipping into the leftover room would make the boundary depend on sizes.
                room = -1
    return within


def order_queue(
    jobs: Sequence[QueuedJob],
    *,
    now: float,
    policy: Policy,
    held: Mapping[str, int],
    guarantees: Mapping[str, int],
    fair_share: Mapping[str, float],
) -> list[QueuedJob]:
    """The pool's scheduling order. Ties always break on submission time, then id."""
    if policy.ordering == Ordering.FIFO:
        return sorted(jobs, key=lambda j: (-int(j.priority_class), j.submitted_at, j.id))

    scored = [
        (j, int(effective_class(j, now, policy)), wait_score(j, now, policy, fair_share.get(j.team, 1.0)))
        for j in jobs
    ]
    within: dict[str, bool] = {}
    if policy.guarantee_first:
        # Walk each team's jobs best-first; those that still fit in the team's unused guarantee
        # form the first tier, so idle guaranteed devices go to their owners before borrowers.
        per_team: dict[str, list[tuple[QueuedJob, int, float]]] = defaultdict(list)
        for item in scored:
            per_team[item[0].team].append(item)
        for team, items in per_team.items():
            items.sort(key=lambda it: (-it[1], -it[2], it[0].submitted_at, it[0].id))
            room = guarantees.get(team, 0) - held.get(team, 0)
            for job, _, _ in items:
                if job.blocked_reason is None and job.devices <= room:
                    within[job.id] = True
                    room -= job.devices
    scored.sort(
        key=lambda it: (
            -it[1],
            0 if within.get(it[0].id, False) else 1,
            -it[2],
            it[0].submitted_at,
            it[0].id,
        )
    )
    return [item[0] for item in scored]


def guarantees_by_team(quotas: Iterable[TeamQuota], pool: str) -> dict[str, int]:
    return {q.team: q.guaranteed_devices for q in quotas if q.pool == pool}


def limits_by_team(quotas: Iterable[TeamQuota], pool: str, capacity: int) -> dict[str, int]:
    """Most devices each team may hold in the pool: guarantee plus borrow limit."""
    limits: dict[str, int] = {}
    for q in quotas:
        if q.pool == pool:
            borrow = capacity if q.borrow_limit is None else q.borrow_limit
            limits[q.team] = q.guaranteed_devices + borrow
    return limits


def explain_policy(policy: Policy) -> list[str]:
    """The rules of a pool in plain words, for the queue page."""
    rules: list[str] = []
    if policy.ordering == Ordering.FIFO:
        rules.append("Jobs run in class order (urgent, normal, low), then in the order they were submitted.")
    else:
        rules.append("Urgent jobs go before normal ones, and normal before low.")
        if policy.class_promotion_s > 0:
            hours = policy.class_promotion_s / HOUR
            rules.append(f"A low-priority job that has waited {hours:g} hours is treated as normal, so it cannot starve.")
        if policy.guarantee_first:
            rules.append(
                "Within a class, jobs that fit inside their team's guaranteed devices go before jobs "
                "that would borrow idle devices from other teams."
            )
        half_life_h = policy.fair_share_half_life_s / HOUR
        rules.append(
            "Then jobs are ranked by how long they have waited compared with how long they are "
            "expected to run: short jobs start sooner, and every minute of waiting moves a job up."
        )
        if policy.fair_share_weight > 0:
            rules.append(
                "Teams that used more than their share of the pool recently rank lower "
                f"(recent use counts half as much after {half_life_h:g} hours)."
            )
    rules.append("Each team may use its guaranteed devices plus, when others leave them idle, a borrowing allowance.")
    rules.append("A job spanning several nodes starts only when all its nodes are free at once.")
    if policy.packing == Packing.BEST_FIT:
        rules.append("Jobs go to the fullest node they fit on, keeping whole nodes free for large jobs.")
    if policy.backfill:
        n = policy.reserve_depth
        who = "the job at the front" if n == 1 else f"the first {n} waiting jobs"
        rules.append(
            f"Devices are reserved for {who}; a later job may start first only if, by its predicted "
            "runtime, it does not delay that reservation."
        )
    else:
        rules.append("No job may start ahead of an earlier one that is still waiting.")
    if policy.preemption:
        rules.append(
            "A higher-class job may stop lower-class preemptible runs that are beyond their team's "
            "guarantee, choosing those that lose the least work since their last checkpoint; runs "
            "inside a guarantee are never stopped."
        )
    if policy.reclaim_borrowed:
        rules.append("A job inside its team's guarantee may also reclaim devices that other teams borrowed.")
    return rules
