"""Ordering rules: aging between classes, guarantees, fair share and virtual deadlines.

Pure functions over the model dataclasses; `core.schedule` calls them once per pool per pass.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from apps.core.text import hours_minutes  # plain Python, no Django
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


def demotion_threshold(policy: Policy) -> float:
    """Seconds of service after which a job is demoted; infinite where the pool does not demote
    (turned off, or FIFO ordering, which is plain submission order by design)."""
    if policy.demote_after_s > 0 and policy.ordering == Ordering.PRIORITY:
        return policy.demote_after_s
    return math.inf


def line_in_rank_order(policy: Policy) -> bool:
    """Whether the pool's line moves forward through rank times, as `estimate.QueueLag` assumes:
    not where least attained service demotes (runs that stop demoted runs start far ahead)."""
    return demotion_threshold(policy) == math.inf


def service(seconds: float, devices: int, policy: Policy) -> float:
    """Attained service of `seconds` run on `devices`: device-seconds under 2-D least attained
    service (`Policy.service_per_device`), else seconds, however wide."""
    return seconds * devices if policy.service_per_device and devices > 1 else seconds


def seconds_to_demotion(attained_s: float, devices: int, policy: Policy) -> float:
    """Seconds more a job with `attained_s` of service must run until it is demoted (its service
    grows by its width per second under 2-D least attained service); 0 or less once demoted,
    infinite where the pool does not demote."""
    rate = devices if policy.service_per_device and devices > 1 else 1
    return (demotion_threshold(policy) - service(attained_s, devices, policy)) / rate


def service_words(seconds: float, devices: int, policy: Policy) -> str:
    """How long a job has run, for its reasons: with its device time where that is its service."""
    if policy.service_per_device and devices > 1:
        return f"{hours_minutes(seconds)} on {devices} devices ({hours_minutes(seconds * devices)} of device time)"
    return hours_minutes(seconds)


def threshold_words(policy: Policy) -> str:
    """The pool's demotion threshold in words (`Policy.demote_after_s`)."""
    return hours_minutes(policy.demote_after_s) + (" of device time" if policy.service_per_device else "")


def min_attempt(preemptions: int, policy: Policy) -> float:
    """Seconds an attempt runs before a job of its class may stop it (it is demoted), for a run
    preempted `preemptions` times so far: `demoted_min_attempt_s` x `min_attempt_growth` ** n, n
    counted from `min_attempt_growth_after`."""
    growth, grown = policy.min_attempt_growth, preemptions - max(0, policy.min_attempt_growth_after)
    if growth <= 1 or grown <= 0:
        return policy.demoted_min_attempt_s
    return policy.demoted_min_attempt_s * math.pow(growth, min(grown, 64))


def starved(job: QueuedJob, now: float, policy: Policy) -> bool:
    """The starvation guard (`Policy.starve_factor`): whether a job that went back in line has
    waited since long enough, for its last attempt's length, to compete as if never demoted."""
    factor, requeued_at = policy.starve_factor, job.requeued_at
    return factor > 0 and requeued_at is not None and (
        now - requeued_at >= factor * max(job.last_run_s, policy.demoted_min_attempt_s, 1.0))


def demoted(job: QueuedJob, policy: Policy, now: float | None = None) -> bool:
    """Whether a waiting job has run long enough, over its earlier attempts, to be demoted (and,
    given `now`, has not waited long enough since to be promoted back: `starved`)."""
    return (
        demotion_threshold(policy) < math.inf
        and job.priority_class <= PriorityClass.NORMAL
        and service(job.attained_s, job.devices, policy) >= policy.demote_after_s
        and not (now is not None and starved(job, now, policy))
    )


# A job's standing decides who may preempt whom: class x STANDING_STEP - service level (see
# `service_level`). A class outweighs any number of levels, so demotion never lets a low job
# stop a normal run; within a class, less service stands higher. A job may preempt only runs of
# a lower standing (and, for runs only demoted below it, under the rules of `Policy`).
STANDING_STEP = 1000


@lru_cache(maxsize=64)
def _level_bounds(threshold: float, factor: float, levels: int = 0) -> tuple[float, ...]:
    """Service at which each level starts: T, T x factor, T x factor², ... (up to ~100 years),
    the first `levels` of them only when it is over 0 (`Policy.demotion_levels`)."""
    if factor <= 1:
        return (threshold,)
    bounds = [threshold]
    while bounds[-1] < 3.2e9 and len(bounds) < STANDING_STEP - 1:
        bounds.append(bounds[-1] * factor)
    return tuple(bounds[:levels] if levels > 0 else bounds)


def service_level(service_s: float, policy: Policy) -> int:
    """0 below the demotion threshold T; then 1 up to T x factor, 2 up to T x factor², and so
    on (Tiresias' multi-level queue): a job waiting at one level may preempt runs that reached
    a deeper one, so a long job cannot keep devices from one that has run a fraction as long."""
    threshold = demotion_threshold(policy)
    if service_s < threshold:
        return 0
    return bisect_right(_level_bounds(threshold, policy.demotion_factor, policy.demotion_levels), service_s)


def standing(klass: int, level: int) -> int:
    return klass * STANDING_STEP - level


def running_standings(running: Iterable[RunningJob], now: float, policy: Policy) -> dict[str, int]:
    """Each run's standing (`STANDING_STEP`): its class, less its service level once demoted."""
    threshold = demotion_threshold(policy)
    if threshold == math.inf:
        return {run.id: int(run.priority_class) * STANDING_STEP for run in running}
    bounds = _level_bounds(threshold, policy.demotion_factor, policy.demotion_levels)
    normal, step, per_device = PriorityClass.NORMAL, STANDING_STEP, policy.service_per_device
    out: dict[str, int] = {}
    # `service` and `standing` inlined: this runs over every run on every pass.
    for run in running:
        attained = run.attained_s + now - run.started_at
        if per_device and run.devices > 1:
            attained = attained * run.devices
        klass = run.priority_class
        if attained >= threshold and klass <= normal:
            out[run.id] = klass * step - bisect_right(bounds, attained)
        else:
            out[run.id] = klass * step
    return out


def key_standing(key: OrderKey, policy: Policy) -> int:
    """A waiting job's standing from its order key (class with aging, or its service level).

    A demoted job in FIFO queues (`Policy.demoted_fifo`) carries its level in the key; a starved
    job that may not preempt (`Policy.starved_preempt` off) stands at its level, wherever it waits."""
    if key[1] == DEMOTED_TIER:
        if key[2] < 0:  # at the cap, first among the demoted (`Policy.capped_first`): its own level
            job = key[5]
            return standing(-key[0], service_level(service(job.attained_s, job.devices, policy), policy))
        return standing(-key[0], int(key[2]) if policy.demoted_fifo else service_level(key[2], policy))
    if policy.starved_preempt or policy.starve_factor <= 0:
        return standing(-key[0], 0)
    job = key[5]
    attained = service(job.attained_s, job.devices, policy)
    low = job.priority_class <= PriorityClass.NORMAL and attained >= demotion_threshold(policy)
    return standing(-key[0], service_level(attained, policy) if low else 0)


def job_size(job: QueuedJob, policy: Policy) -> float:
    """Predicted device-time, softened: width counts less than length."""
    runtime = max(job.predicted_runtime, policy.min_runtime_s, 1.0)
    return runtime * math.pow(max(job.devices, 1), policy.width_exponent)


def virtual_deadline(job: QueuedJob, policy: Policy, fair_share: float) -> float:
    """Earlier runs first: submission time plus stretch x size, stretched more for heavy users.

    Short jobs get near deadlines, which lowers mean completion time. The deadline is fixed
    once (`QueuedJob.deadline`), so every later arrival with a longer size ranks behind it and
    nothing starves. A team at its entitlement (factor 0.5) with weight 1 waits twice as long
    per unit of size. `order_keys` inlines this formula for jobs without a fixed deadline.
    """
    penalty = math.pow(max(fair_share, 1e-12), -policy.fair_share_weight)
    return job.submitted_at + policy.stretch * job_size(job, policy) * penalty


def team_usage_devices(running: Iterable[RunningJob]) -> dict[str, int]:
    held: dict[str, int] = defaultdict(int)
    for run in running:
        held[run.team] += run.devices
    return dict(held)


def runs_within_guarantee(
    running: Sequence[RunningJob],
    guarantees: Mapping[str, int],
    standings: Mapping[str, int] | None = None,
    held: Mapping[str, int] | None = None,
) -> dict[str, bool]:
    """Which runs sit inside their team's guarantee.

    A team's runs fill its guarantee in order of class (highest first; `standings` ranks them
    instead where demotion applies, see `running_standings`) then start time (oldest first);
    whatever spills over is borrowed. This makes the newest, least important runs the borrowed
    ones, so they are the ones preemption may touch. `held` is each team's devices over
    `running` (`team_usage_devices`), where the caller has it.
    """
    # (-standing, start, id, devices) per team: plain tuples sort fast, and this runs every pass.
    by_team: dict[str, list[tuple[int, float, str, int]]] = defaultdict(list)
    for run in running:
        rank = run.priority_class * STANDING_STEP if standings is None else standings[run.id]
        by_team[run.team].append((-rank, run.started_at, run.id, run.devices))
    if held is None:
        held = team_usage_devices(running)
    within: dict[str, bool] = dict.fromkeys((run.id for run in running), False)
    for team, runs in by_team.items():
        room = guarantees.get(team, 0)
        if held[team] <= room:
            # Every run fits, whatever the order: no need to sort.
            within.update((row[2], True) for row in runs)
            continue
        runs.sort()
        for _, _, run_id, devices in runs:
            if devices > room:
                # Once a run spills over, everything after it is borrowed too: a small later run
                # slipping into the leftover room would make the boundary depend on sizes.
                break
            within[run_id] = True
            room -= devices
    return within


# (-class, tier, rank time, submitted_at, id, job). The rank time is the virtual deadline under
# the priority ordering and the submission time under FIFO: in both, the line moves forward
# through rank times, which is what the wait estimator's lag model (`QueueLag`) relies on.
# Demoted jobs (tier DEMOTED_TIER, behind every other job of their class) rank by the seconds
# they have run instead, least first: not a time, so no lag applies to them (`rank_time`).
OrderKey = tuple[int, int, float, float, str, QueuedJob]
DEMOTED_TIER = 2


def rank_time(key: OrderKey) -> float | None:
    """The key's rank time, or None for a demoted job (ranked by service, not by a time)."""
    return None if key[1] == DEMOTED_TIER else key[2]


def order_keys(
    jobs: Sequence[QueuedJob],
    *,
    now: float,
    policy: Policy,
    held: Mapping[str, int],
    guarantees: Mapping[str, int],
    fair_share: Mapping[str, float],
) -> list[OrderKey]:
    """Sort keys for the pool's order (smallest first); ties break on submission time, then id.

    Returned unsorted so a pass that needs only the front can heapify instead of sorting.
    This runs on every pass over every queued job, so it is kept tight.
    """
    if policy.ordering == Ordering.FIFO:
        # (Negating an IntEnum gives a plain int, cheaper than int() first.)
        return [(-j.priority_class, 1, j.submitted_at, j.submitted_at, j.id, j) for j in jobs]
    keyed = _priority_keys(jobs, now=now, policy=policy, fair_share=fair_share)
    if policy.guarantee_first:
        _guarantee_tier(keyed, held, guarantees)
    return keyed


def _priority_keys(
    jobs: Sequence[QueuedJob], *, now: float, policy: Policy, fair_share: Mapping[str, float]
) -> list[OrderKey]:
    """`order_keys` under the priority ordering, before the guarantee tier: class with aging,
    then virtual deadline, demoted jobs behind their class."""
    keyed: list[OrderKey] = []
    promote_before = now - policy.class_promotion_s if policy.class_promotion_s > 0 else -math.inf
    low, normal = int(PriorityClass.LOW), int(PriorityClass.NORMAL)
    min_runtime = max(policy.min_runtime_s, 1.0)
    # Per-team and per-width factors once, then `virtual_deadline` inlined per job.
    team_stretch = {
        team: policy.stretch * math.pow(max(f, 1e-12), -policy.fair_share_weight) for team, f in fair_share.items()
    }
    width_factor: dict[int, float] = {}
    # Local names: this loop visits every queued job on every pass.
    stretch_of, default_stretch, exponent = team_stretch.get, policy.stretch, policy.width_exponent
    append = keyed.append
    demote_after = demotion_threshold(policy)
    per_device, guarded = policy.service_per_device, policy.starve_factor > 0
    # `_demoted_key` inlined where it is plain least service first (the default).
    plain_demoted = not (policy.demoted_fifo or (policy.capped_first and policy.max_preemptions > 0))
    for j in jobs:
        klass: int = j.priority_class
        submitted = j.submitted_at
        attained = j.attained_s * j.devices if per_device and j.devices > 1 else j.attained_s  # `service`
        if attained >= demote_after and klass <= normal and not (
                guarded and j.requeued_at is not None and starved(j, now, policy)):
            append((-klass, DEMOTED_TIER, attained, submitted, j.id, j) if plain_demoted
                   else _demoted_key(j, klass, attained, policy))
            continue
        if klass == low and submitted <= promote_before:
            klass = normal
        deadline = j.deadline
        if deadline is None:
            devices = j.devices
            width = width_factor.get(devices)
            if width is None:
                width = width_factor[devices] = math.pow(max(devices, 1), exponent)
            runtime = j.predicted_runtime
            if runtime < min_runtime:
                runtime = min_runtime
            deadline = submitted + stretch_of(j.team, default_stretch) * runtime * width
        append((-klass, 1, deadline, submitted, j.id, j))
    return keyed


def _demoted_key(j: QueuedJob, klass: int, attained: float, policy: Policy) -> OrderKey:
    """A demoted job's key (see `demoted`): behind every job of its class, least service first,
    or by level, then submission (`Policy.demoted_fifo`: the key holds the level)."""
    if policy.capped_first and policy.max_preemptions > 0 and j.preemptions >= policy.max_preemptions:
        return (-klass, DEMOTED_TIER, -1.0, j.submitted_at, j.id, j)  # `Policy.capped_first`
    level_or_service = float(service_level(attained, policy)) if policy.demoted_fifo else attained
    return (-klass, DEMOTED_TIER, level_or_service, j.submitted_at, j.id, j)


def _guarantee_tier(keyed: list[OrderKey], held: Mapping[str, int], guarantees: Mapping[str, int]) -> None:
    """Move to tier 0, in place, the jobs that fit inside their team's unused guarantee."""
    # Walk each team's jobs best-first; those that still fit in the team's unused guarantee
    # form the first tier, so idle guaranteed devices go to their owners before borrowers.
    room = {team: g - held.get(team, 0) for team, g in guarantees.items() if g > held.get(team, 0)}
    if room:
        per_team: dict[str, list[int]] = defaultdict(list)
        for index, item in enumerate(keyed):
            if item[5].team in room:
                per_team[item[5].team].append(index)
        for team, indexes in per_team.items():
            indexes.sort(key=lambda i: keyed[i][:5])
            left = room[team]
            for i in indexes:
                job = keyed[i][5]
                if keyed[i][1] == DEMOTED_TIER:
                    continue  # demoted: it had its turn; the guarantee goes to jobs that have not
                if job.blocked_reason is None and job.devices <= left:
                    left -= job.devices
                    keyed[i] = (keyed[i][0], 0, *keyed[i][2:])


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
    rules = _order_rules(policy)
    rules.append("Each team may use its guaranteed devices plus, when others leave them idle, a borrowing allowance.")
    rules.append("A job spanning several nodes starts only when all its nodes are free at once.")
    if policy.packing == Packing.BEST_FIT:
        rules.append("Jobs go to the fullest node they fit on, keeping whole nodes free for large jobs.")
    if policy.headroom_devices > 0:
        rules.append(
            f"The last {policy.headroom_devices} free devices are kept for jobs expected to finish within "
            f"{policy.headroom_max_runtime_s / HOUR:g} hours, so short jobs can start right away."
        )
    if policy.backfill:
        n = policy.reserve_depth
        who = "the job at the front" if n == 1 else f"the first {n} waiting jobs"
        rules.append(
            f"Devices are reserved for {who}; a later job may start first only if, by its predicted "
            "runtime, it does not delay that reservation."
        )
    else:
        rules.append("No job may start ahead of an earlier one that is still waiting.")
    rules.extend(_preemption_rules(policy))
    if policy.reclaim_borrowed:
        rules.append("A job inside its team's guarantee may also reclaim devices that other teams borrowed.")
    return rules


def _order_rules(policy: Policy) -> list[str]:
    """How the line is ordered."""
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
            "Then each job gets a deadline when it is submitted: the longer it is expected to run "
            f"(and the more devices it uses), the later the deadline ({policy.stretch:g} times its expected "
            "length). The earliest deadline goes first, so short jobs start sooner, and a deadline never "
            "moves, so no job waits forever behind newer ones."
        )
        if policy.fair_share_weight > 0:
            rules.append(
                "Teams that used more than their share of the pool recently get later deadlines "
                f"(recent use counts half as much after {half_life_h:g} hours)."
            )
        if policy.promise_estimates:
            rules.append(
                "The first start a waiting job is estimated is kept as a promise: where it is earlier than "
                "the job's deadline it becomes the deadline, so jobs submitted later go behind it."
            )
    return rules


def _preemption_rules(policy: Policy) -> list[str]:
    """Who may stop whom."""
    rules: list[str] = []
    if policy.preemption:
        rules.append(
            "A higher-class job may stop lower-class preemptible runs that are beyond their team's "
            "guarantee, choosing those that lose the least work since their last checkpoint; runs "
            "inside a guarantee are never stopped."
        )
    if demotion_threshold(policy) < math.inf and policy.preemption:
        rules.append(
            f"A job that has run for {threshold_words(policy)} in all is demoted: while it runs, a new "
            "job of its class (or higher) that cannot start otherwise may stop it (if it is preemptible and beyond "
            "its team's guarantee, never within it), and it resumes from its latest checkpoint when devices come "
            "free, behind the jobs of its class that have not been demoted. Among demoted jobs, the one that has "
            "run least goes first"
            + (f", and may stop one that has run {policy.demotion_factor:g} times as long or more." if policy.demotion_factor > 1
               else ".")
            + " Most jobs are short, so they start at once instead of waiting behind long ones; long ones take "
            "turns. Urgent jobs are never demoted."
        )
        if policy.service_per_device:
            rules.append("Service counts device time: a job on 8 devices has run an hour of it in 7.5 minutes.")
        if policy.demoted_min_attempt_s > 0:
            rules.append(
                f"A demoted job that has just resumed runs at least {hours_minutes(policy.demoted_min_attempt_s)} "
                "before it can be stopped again"
                + (f", {policy.min_attempt_growth:g} times as long after each time it is stopped"
                   + (f" beyond the first {policy.min_attempt_growth_after}" if policy.min_attempt_growth_after > 0 else "")
                   + "." if policy.min_attempt_growth > 1 else ".")
            )
        if policy.demotion_levels > 0 and policy.demotion_factor > 1:
            # A limit past the ~100-year ladder leaves every level as it was: no rule to state.
            bounds = _level_bounds(demotion_threshold(policy), policy.demotion_factor, policy.demotion_levels)
            if len(bounds) == policy.demotion_levels:
                rules.append(f"Jobs that have run {hours_minutes(bounds[-1])} or more stand together: "
                             "none of them stops another to take its turn.")
        if policy.demoted_fifo:
            rules.append("Demoted jobs that have run about as long (the same level) resume in the order they were submitted.")
        if policy.starve_factor > 0:
            rules.append(
                f"A demoted job that has waited {policy.starve_factor:g} times as long as its last turn ran goes back "
                "ahead of the demoted jobs, by its original deadline"
                + (", and may stop demoted runs as a new job may." if policy.starved_preempt
                   else "; it takes devices as they come free and stops nobody.")
            )
        if policy.max_preemptions > 0:
            rules.append(f"A run stopped {policy.max_preemptions} times is not stopped again but for an urgent job.")
            if policy.pack_capped:
                rules.append("Such runs start beside one another where they fit, keeping whole nodes free to clear.")
            if policy.capped_share > 0:
                rules.append(f"Such runs hold at most {policy.capped_share:.0%} of the pool's devices at once; beyond it they wait.")
            if policy.capped_first:
                rules.append("Waiting, such runs go first among the demoted jobs.")
        if policy.victim_preemption_cost_s > 0:
            rules.append("Among possible victims, runs stopped fewer times before go first.")
    return rules
