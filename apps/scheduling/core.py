"""Trainyard scheduler core: cluster state in, decisions out. No Django, no clock, no dice.

The portal (a Celery task on every submit/finish and on a beat) and the trace simulator both
build a `ClusterState` and call `schedule(state)`. The answer says which queued jobs start
where, which runs to stop for whom, and, for every queued job, its place in line and why it
waits. The same input always gives the same answer: every sort breaks ties on time, then id.

The rules, per pool, in the order they apply:

1. Eligibility. A job held from outside (budget) waits with that reason. A job whose shape no
   set of ready nodes could ever hold waits with "no such hardware". A team may hold at most
   its guaranteed devices plus its borrowing limit in a pool; beyond that its jobs wait for
   quota and do not hold up anyone else.
2. Order. Urgent before normal before low; a low job that waited long enough competes as
   normal (aging between classes). Within a class, jobs that fit inside their team's unused
   guarantee may go first (`guarantee_first`), so idle guaranteed devices reach their owners
   before borrowers (the Kueue cohort idea). Then the earliest virtual deadline goes first:
   submission time + stretch x size, where size is the predicted runtime times sqrt(width), and
   the stretch grows for teams that used more than their share recently (Slurm's fair-share
   factor 2^-(recent use / entitled share), from usage decayed with a half-life). Short jobs
   start sooner, which lowers mean completion time. A job's deadline is fixed when it first
   meets a pass (`deadlines_due`) and never moves after, whatever later predictions or usage
   say, so later arrivals eventually rank behind any waiting job, nothing starves, and a place
   in line only ever improves. The FIFO ordering (class, then submission time) is there for
   comparison.
3. Placement. A gang gets all its nodes at once or nothing. Best-fit packing puts a job on the
   fullest node it fits, keeping whole nodes free for wide gangs.
4. Backfill (EASY). The first `reserve_depth` jobs that do not fit get a reservation: the
   earliest time, by predicted ends of running work, when their gang fits, on specific nodes.
   A later job may start now only if it leaves those reservations intact: it is predicted to
   end before the reserved start, or it uses devices the reservation does not need. Without
   backfill the first blocked job stops everyone behind it.
   Optionally the last `headroom_devices` free devices are kept for jobs predicted to be short,
   so those start on arrival even when the pool is busy.
5. Preemption. A job that does not fit may stop preemptible runs of a lower class that are
   beyond their team's guarantee (never a run inside a guarantee). Victims are chosen to lose
   the least work since their last checkpoint. The job then waits for them to stop, with its
   nodes held so nothing else slips in.
6. Least attained service (`Policy.demote_after_s`, after Tiresias). Runtimes of training jobs
   are heavy-tailed and mostly unknown at submission, so instead of guessing which job is short
   the pool watches how long each has run. A normal (or low) run that has run longer than the
   threshold in all is demoted: it stands below every run of its class that has not been, at a
   level that deepens with every further factor of service (`demotion_factor`). A waiting job may preempt runs at a lower standing
   under rule 5 (beyond their guarantee, cheapest checkpoint first, and not in the first minutes
   of a resumed attempt), so a new job starts at once, and a demoted job that ran an hour is not
   stuck behind runs that have run for days. Waiting demoted jobs sit behind every job of their
   class that has not been demoted, the one that has run least first, and resume from their
   checkpoints. A class still outweighs service: a low job never stops a normal run.
   Urgent runs are never demoted. Standing (`policies.STANDING_STEP`) orders all of this.

Fragmentation figures count free devices that no queued shape could use after the pass.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from apps.core.text import hours_minutes, plural  # plain Python, no Django
from apps.scheduling.model import (
    RETRY_BACKOFF,
    ClusterState,
    Decision,
    Fragmentation,
    Node,
    NodeState,
    Ordering,
    Packing,
    Placement,
    Policy,
    Preemption,
    PreemptionKind,
    PriorityClass,
    QueuedJob,
    QueueEntry,
    RunningJob,
    TeamQuota,
    TeamUsage,
    WaitCode,
)
from apps.scheduling.placement import INF, PoolCapacity
from apps.scheduling.policies import (
    DEMOTED_TIER,
    STANDING_STEP,
    OrderKey,
    decay_usage,
    demoted,
    demotion_threshold,
    explain_policy,
    fair_share_factors,
    guarantees_by_team,
    key_standing,
    limits_by_team,
    min_attempt,
    order_keys,
    running_standings,
    runs_within_guarantee,
    service_level,
    service_words,
    standing,
    starved,
    team_usage_devices,
    threshold_words,
    virtual_deadline,
)
from apps.scheduling.preempt import VictimIndex, plan_preemption

__all__ = [
    "ClusterState",
    "Decision",
    "Fragmentation",
    "Node",
    "NodeState",
    "Ordering",
    "Packing",
    "Placement",
    "Policy",
    "Preemption",
    "PreemptionKind",
    "PriorityClass",
    "QueueEntry",
    "QueuedJob",
    "RunningJob",
    "TeamQuota",
    "TeamUsage",
    "WaitCode",
    "deadlines_due",
    "decay_usage",
    "explain_policy",
    "queue_keys",
    "queue_order",
    "schedule",
]


# A team without a quota row in a pool has no cap there (guarantee 0, borrows freely).
UNLIMITED = 1 << 62


@dataclass(slots=True)
class _Blocker:
    job: QueuedJob
    effective: PriorityClass
    reserved_start: float | None


Shape = tuple[int, int, int, float]  # (nodes, devices, memory, CPU cores per node) of a gang: `QueuedJob.shape`


@dataclass(slots=True)
class _Walk:
    """What one pool's pass knows, and has decided so far, while it walks the line."""

    cap: PoolCapacity
    guarantees: dict[str, int]
    # Devices each team holds in the pool, this pass's placements included.
    held: dict[str, int]
    limits: dict[str, int]
    fair_share: dict[str, float]
    # Shortest predicted runtime per gang shape among the jobs not held from outside.
    shortest: dict[Shape, float]
    keyed: list[OrderKey]
    # The standing a waiting job must beat to preempt anyone; None once nobody can.
    lowest_victim: int | None
    # Shapes that might still start a job in this pass, and those among them with a job short
    # enough to use the headroom. Without reasons to give, the pass ends once none is left.
    live: set[Shape]
    live_short: set[Shape]
    # How many blocked jobs get a reservation (`Policy.reserve_depth`, at least 1).
    reserve_depth: int
    # Runs chosen as victims in this pass, or stopping on nodes held for a preemptor.
    taken: set[str] = field(default_factory=set)
    # Waiting job -> (its class, the stopping runs it has first claim on: `RunningJob.stopping_for`),
    # until its turn in the walk is over.
    claims: dict[str, tuple[int, set[str]]] = field(default_factory=dict)
    # (shape, team when reclaiming) -> the highest standing that found no victims.
    preempt_failed: dict[tuple[Shape, str], float] = field(default_factory=dict)
    # (shape, standing) of each failed plan made while no job had first claim on stopping runs
    # and none was reclaiming: a gang at least as large in every part, standing no higher,
    # cannot find victims either (`_dominated`).
    failed_plans: list[tuple[Shape, int]] = field(default_factory=list)
    # Whether some set of ready nodes could ever hold the shape.
    hardware: dict[Shape, bool] = field(default_factory=dict)
    # The earliest predicted end at which the shape did not fit.
    failed_end: dict[Shape, float] = field(default_factory=dict)
    blockers: list[_Blocker] = field(default_factory=list)
    # How many have one so far.
    reservations: int = 0
    # Without backfill the first blocked job stops the line.
    stop_all: bool = False


@dataclass(slots=True)
class _PoolPass:
    pool: str
    now: float
    policy: Policy
    nodes: Sequence[Node]
    running: Sequence[RunningJob]
    queued: Sequence[QueuedJob]
    quotas: Sequence[TeamQuota]
    usage: dict[str, float]
    explain: bool
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    run_standing: dict[str, int] = field(default_factory=dict)
    # Runs some waiting job could stop, beyond their team's guarantee (`_victim_floor`).
    borrowed: list[RunningJob] = field(default_factory=list)
    # Built on the pass's first preemption attempt (`_try_preempt`).
    victims: VictimIndex | None = None
    top_standing: float = INF
    # Nodes holding a run that reached `Policy.max_preemptions` (`Policy.pack_capped`); built on
    # the first such placement of the pass.
    capped_nodes: set[int] | None = None
    # Devices held by runs that reached the cap (`Policy.capped_share`), and the pool's ready devices.
    capped_held: int | None = None
    capacity: int = 0
    entries: list[QueueEntry] = field(default_factory=list)
    order: tuple[str, ...] = ()
    fragmentation: Fragmentation | None = None

    def run(self) -> None:
        cap = PoolCapacity(self.nodes, self.running, self.policy.packing)
        walk = self._prepare(cap)
        if walk is None:
            return
        if self.explain:
            walk.keyed.sort()
            self.order = tuple(item[5].id for item in walk.keyed)
            ordered: Iterable[OrderKey] = walk.keyed
        else:
            # Without reasons to give, only the front of the line matters: pop it lazily.
            heapq.heapify(walk.keyed)
            ordered = _drain(walk.keyed)
        self._walk(walk, ordered)
        if self.explain:
            self.fragmentation = self._fragmentation(cap, [item[5] for item in walk.keyed], walk.hardware)

    # -- before the walk --------------------------------------------------------------------

    def _prepare(self, cap: PoolCapacity) -> _Walk | None:
        """The walk's starting state, or None when, without reasons to give, nothing can change."""
        policy, now, explain = self.policy, self.now, self.explain
        guarantees = guarantees_by_team(self.quotas, self.pool)
        held = team_usage_devices(self.running)
        lowest_victim = self._victim_floor(guarantees, held)
        shortest = self._survey()
        # Reclaiming borrowed devices ignores standing, so only without it can standing rule
        # preemption out.
        if not policy.reclaim_borrowed and lowest_victim is not None and self.top_standing <= lowest_victim:
            lowest_victim = None  # no waiting job stands above any possible victim
        if not explain and cap.free_sum == 0 and lowest_victim is None:
            # A full pool with nobody to preempt: nothing can change, and no reasons were asked
            # for, so skip ordering altogether (the common case on a busy cluster).
            return None

        capacity = self.capacity = sum(t for i, t in enumerate(cap.total) if cap.ready[i])
        limits = limits_by_team(self.quotas, self.pool, capacity)
        fair_share = _fair_share(policy, self.queued, self.usage, guarantees)
        if not explain and lowest_victim is None and not any(
            cap.find(k, d, now + r, memory=m, cpus=c) is not None and self._clears_headroom(cap, k * d, r)
            for (k, d, m, c), r in shortest.items()
        ):
            return None

        keyed = order_keys(self.queued, now=now, policy=policy, held=held, guarantees=guarantees, fair_share=fair_share)
        claims: dict[str, tuple[int, set[str]]] = {}
        if any(r.stopping_for is not None for r in self.running):
            waiting = {j.id: int(j.priority_class) for j in self.queued if j.blocked_reason is None}
            for r in self.running:
                owner = r.stopping_for
                if r.stopping and owner is not None and owner in waiting:
                    claims.setdefault(owner, (waiting[owner], set()))[1].add(r.id)
        return _Walk(
            cap=cap,
            guarantees=guarantees,
            held=held,
            limits=limits,
            fair_share=fair_share,
            shortest=shortest,
            keyed=keyed,
            lowest_victim=lowest_victim,
            live=set(shortest),
            live_short={shape for shape, r in shortest.items() if r <= policy.headroom_max_runtime_s},
            reserve_depth=max(1, policy.reserve_depth),
            claims=claims,
        )

    def _victim_floor(self, guarantees: dict[str, int], held: dict[str, int]) -> int | None:
        """The lowest standing (class, or service level once demoted: `policies.STANDING_STEP`)
        among the runs some waiting job could stop: preemptible, not already stopping, beyond their
        team's guarantee, and stopped fewer than `Policy.max_preemptions` times unless an urgent job
        waits. A job of that standing or lower has nobody to preempt. Sets `run_standing` and
        `borrowed` (those runs)."""
        if not (self.policy.preemption and any(r.preemptible and not r.stopping for r in self.running)):
            return None
        # An urgent job waiting may stop runs past the cap too; only the cap asks (a look at every
        # waiting job).
        limit = self.policy.max_preemptions
        urgent = limit != 0 and any(j.priority_class >= PriorityClass.URGENT for j in self.queued)
        run_standing = self.run_standing = running_standings(self.running, self.now, self.policy)
        within_run = runs_within_guarantee(self.running, guarantees, run_standing, held)
        # One comprehension: this runs over every run on every pass.
        borrowed = self.borrowed = [
            r for r in self.running
            if r.preemptible and not r.stopping and (not limit or r.preemptions < limit or urgent) and not within_run[r.id]
        ]
        return min((run_standing[r.id] for r in borrowed), default=None)

    def _survey(self) -> dict[Shape, float]:
        """Shortest predicted runtime per gang shape (if not even that fits anywhere now, no job of
        the shape can start in this pass). Sets `top_standing`, the highest of any waiting job."""
        policy = self.policy
        shortest: dict[Shape, float] = {}
        top_class = -1
        # The least service of a demoted job in each class: the highest standing among them.
        least_service: dict[int, float] = {}
        if self.queued:
            demote_after = demotion_threshold(policy)
            promote_before = self.now - policy.class_promotion_s if policy.class_promotion_s > 0 else -INF
            low, normal = int(PriorityClass.LOW), int(PriorityClass.NORMAL)
            # Only the guard, when it lifts standing too, can undo a demotion here: asked once.
            guarded, per_device, now = policy.starved_preempt and policy.starve_factor > 0, policy.service_per_device, self.now
            for j in self.queued:
                if j.blocked_reason is not None:
                    continue
                shape = j.shape
                if j.predicted_runtime < shortest.get(shape, INF):
                    shortest[shape] = j.predicted_runtime
                klass: int = j.priority_class
                attained = j.attained_s * j.devices if per_device and j.devices > 1 else j.attained_s  # `service`
                if klass <= normal and attained >= demote_after and not (
                        guarded and j.requeued_at is not None and starved(j, now, policy)):
                    if attained < least_service.get(klass, INF):
                        least_service[klass] = attained
                    continue
                if klass == low and j.submitted_at <= promote_before:
                    klass = normal
                if klass > top_class:
                    top_class = klass
        top_standing: float = top_class * STANDING_STEP if top_class >= 0 else -INF
        for demoted_class, least in least_service.items():
            top_standing = max(top_standing, standing(demoted_class, service_level(least, policy)))
        self.top_standing = top_standing
        return shortest

    # -- the walk ---------------------------------------------------------------------------

    def _walk(self, walk: _Walk, ordered: Iterable[OrderKey]) -> None:
        """Each job in line order: admitted, then placed, or preempting, or reserved, or waiting."""
        policy, explain, now = self.policy, self.explain, self.now
        by_standing = not policy.reclaim_borrowed
        done: str | None = None  # the job whose turn just ended
        for position, item in enumerate(ordered, start=1):
            lowest = walk.lowest_victim
            mine = key_standing(item, policy) if lowest is not None else 0
            if by_standing and lowest is not None and mine <= lowest and (
                    (item[1] == DEMOTED_TIER and item[2] >= 0) or mine % STANDING_STEP == 0):
                # Standing only falls along the line: from here on nobody outranks a possible victim.
                # (Not so past a starved job that keeps its demoted standing: `Policy.starved_preempt`,
                # nor past a run at the cap that goes first among the demoted: `Policy.capped_first`.)
                walk.lowest_victim = lowest = None
            if not explain and self._exhausted(walk):
                break
            job = item[5]
            if walk.claims:
                # From a claimant's turn on, what it did not take is anyone's.
                if done is not None:
                    walk.claims.pop(done, None)
                done = job.id
            if not self._admitted(walk, job, position):
                continue
            klass = -item[0]  # the effective class (aging applied), as an int: cheap to compare
            if walk.stop_all:
                if explain:
                    self._behind(job, PriorityClass(klass), position, walk.blockers, walk.fair_share)
                continue
            avoid = walk.cap.avoidable(job.avoid_nodes, job.nodes, job.devices_per_node) if job.avoid_nodes else frozenset()
            end = now + max(job.predicted_runtime, 0.0)
            # (A shape that did not fit by an earlier end cannot fit now: see `_place`.)
            if end < walk.failed_end.get(job.shape, INF) and self._place(walk, job, position, avoid, end):
                continue
            if lowest is not None and self._preempt_for(walk, job, klass, mine, lowest, position):
                continue
            if walk.reservations < walk.reserve_depth:
                self._reserve(walk, job, klass, position, avoid)
            elif explain:
                # Building the reason costs an enum lookup per job; passes without reasons walk
                # hundreds of waiting jobs, so they skip the call altogether.
                self._behind(job, PriorityClass(klass), position, walk.blockers, walk.fair_share, cap=walk.cap)

    def _exhausted(self, walk: _Walk) -> bool:
        """Without reasons to give: whether no later job in line could start or preempt."""
        if walk.stop_all:
            return True
        if walk.lowest_victim is not None:
            return False
        free, headroom = walk.cap.free_sum, self.policy.headroom_devices
        return free == 0 or not walk.live or (headroom > 0 and free <= headroom and not walk.live_short)

    def _admitted(self, walk: _Walk, job: QueuedJob, position: int) -> bool:
        """False, with the reason, for a job held from outside, with no such hardware, or over quota."""
        if job.blocked_reason is not None:
            code = WaitCode.RETRY_BACKOFF if job.blocked_reason == RETRY_BACKOFF else WaitCode.BUDGET
            self._entry(job, position, code, job.blocked_message or job.blocked_reason)
            return False
        shape = job.shape
        fits_hardware = walk.hardware.get(shape)
        if fits_hardware is None:
            fits_hardware = walk.hardware[shape] = (
                job.nodes >= 1
                and job.devices_per_node >= 1
                and walk.cap.ready_nodes_with_total(job.devices_per_node, shape[2], shape[3]) >= job.nodes
            )
        if not fits_hardware:
            self._no_hardware(job, position, walk.cap)
            return False
        limit = walk.limits.get(job.team, UNLIMITED)
        if walk.held.get(job.team, 0) + job.devices > limit:
            self._entry(
                job,
                position,
                WaitCode.QUOTA,
                f"Team {job.team} holds {walk.held.get(job.team, 0)} of the {limit} devices it may use in pool "
                f"{self.pool} (guaranteed {walk.guarantees.get(job.team, 0)} plus borrowing); this job needs "
                f"{job.devices} more.",
            )
            return False
        if not self._capped_room(job):
            self._entry(
                job,
                position,
                WaitCode.QUOTA,
                f"It was stopped {plural(job.preemptions, 'time')} and will not be stopped again; runs like it may "
                f"hold at most {self.policy.capped_share:.0%} of pool {self.pool}'s devices at once, and they do.",
            )
            return False
        return True

    def _capped_room(self, job: QueuedJob) -> bool:
        """False for a job at the cap that would take runs at the cap past `Policy.capped_share`."""
        policy = self.policy
        limit = policy.max_preemptions
        if not (policy.capped_share > 0 and 0 < limit <= job.preemptions):
            return True
        if self.capped_held is None:
            self.capped_held = sum(r.devices for r in self.running if r.preemptions >= limit and not r.stopping)
        return self.capped_held + job.devices <= policy.capped_share * self.capacity

    def _place(self, walk: _Walk, job: QueuedJob, position: int, avoid: frozenset[int], end: float) -> bool:
        """Start the job now, to end at `end`, if it fits; True when that settled its turn (started,
        or kept off the headroom)."""
        shape = job.shape
        _, _, memory, cpus = shape
        cap = walk.cap
        packed = self._capped_elsewhere(job, cap)
        chosen = None if packed is None else cap.find(
            job.nodes, job.devices_per_node, end, avoid=avoid | packed, memory=memory, cpus=cpus)
        if chosen is None:
            chosen = cap.find(job.nodes, job.devices_per_node, end, avoid=avoid, memory=memory, cpus=cpus)
        if chosen is None:
            # Capacity only shrinks and reservations only tighten during a pass, so any later
            # job of this shape that runs at least as long cannot fit either (unless this one
            # was kept off some nodes).
            if not avoid:
                walk.failed_end[shape] = end
            if not self.explain and cap.find(
                job.nodes, job.devices_per_node, self.now + walk.shortest[shape], memory=memory, cpus=cpus
            ) is None:
                walk.live.discard(shape)
                walk.live_short.discard(shape)
            return False
        headroom = self.policy.headroom_devices
        if headroom and not self._clears_headroom(cap, job.devices, job.predicted_runtime):
            # It fits, but only by eating the devices kept for short jobs. Not a capacity
            # failure, so it takes no reservation (that would fence off the headroom).
            if self.explain:
                self._entry(
                    job,
                    position,
                    WaitCode.HEADROOM,
                    f"The last {headroom} free devices of pool {self.pool} are kept for jobs expected to "
                    "finish soon; this one is expected to run longer.",
                )
            return True
        cap.take(chosen, job.devices_per_node, end, memory, cpus)
        if packed is not None and self.capped_nodes is not None:
            self.capped_nodes.update(chosen)
        if self.capped_held is not None and 0 < self.policy.max_preemptions <= job.preemptions:
            self.capped_held += job.devices
        walk.held[job.team] = walk.held.get(job.team, 0) + job.devices
        alloc = tuple((cap.ids[i], job.devices_per_node) for i in chosen)
        self.placements.append(Placement(job.id, self.pool, alloc))
        if self.explain:
            where = ", ".join(f"{n} ({c})" for n, c in alloc)
            self._entry(job, position, WaitCode.PLACED, f"Starting on {where}.")
        return True

    def _capped_elsewhere(self, job: QueuedJob, cap: PoolCapacity) -> frozenset[int] | None:
        """For a job that reached the cap, under `Policy.pack_capped`: the ready nodes holding no run
        that reached it, to keep it off while it fits on those that do; else None."""
        limit = self.policy.max_preemptions
        if not (self.policy.pack_capped and 0 < limit <= job.preemptions):
            return None
        if self.capped_nodes is None:
            self.capped_nodes = {
                cap.index[node_id] for run in self.running if run.preemptions >= limit and not run.stopping
                for node_id, _ in run.allocation if node_id in cap.index
            }
        return frozenset(i for i in range(len(cap.ids)) if i not in self.capped_nodes)

    def _clears_headroom(self, cap: PoolCapacity, devices: int, runtime: float) -> bool:
        """Short jobs may use any free device; longer ones must leave the headroom free."""
        policy = self.policy
        return (
            policy.headroom_devices <= 0
            or runtime <= policy.headroom_max_runtime_s
            or cap.free_sum - devices >= policy.headroom_devices
        )

    def _reserve(self, walk: _Walk, job: QueuedJob, klass: int, position: int, avoid: frozenset[int]) -> None:
        """One of the first `reserve_depth` jobs that cannot start: the earliest start its gang fits,
        which later jobs may not delay (EASY backfill)."""
        policy = self.policy
        walk.reservations += 1
        if not policy.backfill:
            # The first blocked job stops the line; its reservation only feeds the message.
            walk.stop_all = True
        _, _, memory, cpus = job.shape
        start = (
            walk.cap.reserve(job.nodes, job.devices_per_node, self.now, avoid, memory, cpus)
            if policy.backfill or self.explain else None
        )
        walk.blockers.append(_Blocker(job, PriorityClass(klass), start))
        if self.explain:
            self._head(job, position, start, walk.cap)

    # -- preemption -------------------------------------------------------------------------

    def _preempt_for(self, walk: _Walk, job: QueuedJob, klass: int, mine: int, lowest: int, position: int) -> bool:
        """Stop runs that stand below the job (or reclaim borrowed devices) to make room for it."""
        reclaiming = self.policy.reclaim_borrowed and walk.held.get(job.team, 0) + job.devices <= walk.guarantees.get(job.team, 0)
        # Victims only get scarcer during a pass: once a shape found none for a class, later
        # jobs of that shape and no higher class find none either.
        memo = (job.shape, job.team if reclaiming else "")
        if not ((reclaiming or mine > lowest) and mine > walk.preempt_failed.get(memo, -INF)):
            return False
        if not reclaiming and walk.failed_plans and _dominated(job.shape, mine, walk.failed_plans):
            walk.preempt_failed[memo] = mine
            return False
        if self._try_preempt(walk, job, PriorityClass(klass), mine, reclaiming, position):
            walk.blockers.append(_Blocker(job, PriorityClass(klass), self.now))
            return True
        walk.preempt_failed[memo] = mine
        if not reclaiming and not walk.claims:
            walk.failed_plans.append((job.shape, mine))
        return False

    def _try_preempt(self, walk: _Walk, job: QueuedJob, klass: PriorityClass, mine: int, reclaim: bool, position: int) -> bool:
        now, policy, standings = self.now, self.policy, self.run_standing

        cap_stops = policy.max_preemptions if klass < PriorityClass.URGENT else 0
        minimum: dict[int, float] = {}  # `min_attempt` by stops so far

        def eligible(run: RunningJob) -> bool:
            # (The index holds only preemptible runs beyond their guarantee, none stopping.)
            if 0 < cap_stops <= run.preemptions:
                return False  # stopped often enough: only an urgent job may stop it again
            if run.priority_class < klass:
                return True
            if standings.get(run.id, mine) < mine:
                # Demoted for its service: fair game once this attempt has had its minimum.
                least = minimum.get(run.preemptions)
                if least is None:
                    least = minimum[run.preemptions] = min_attempt(run.preemptions, policy)
                return now - run.started_at >= least
            return reclaim and run.team != job.team

        cap = walk.cap
        if self.victims is None:
            self.victims = self._victim_index(cap)
        _, _, memory, cpus = job.shape
        taken = walk.taken
        if walk.claims:
            # Devices stopping for another waiting job are its, unless this one is of a higher class.
            others = [runs for owner, (owner_class, runs) in walk.claims.items() if owner != job.id and klass <= owner_class]
            if others:
                taken = taken.union(*others)
        plan = plan_preemption(
            cap=cap,
            index=self.victims,
            eligible=eligible,
            taken=taken,
            nodes=job.nodes,
            devices=job.devices_per_node,
            memory=memory,
            cpus=cpus,
        )
        if plan is None:
            return False
        cap.hold(plan.nodes, job.devices_per_node, now, memory, cpus)
        held_ids = {cap.ids[i] for i in plan.nodes}
        for run in self.running:
            if run.stopping and any(node_id in held_ids for node_id, _ in run.allocation):
                walk.taken.add(run.id)
        for victim in plan.victims:
            walk.taken.add(victim.id)
            self.preemptions.append(self._preemption(victim, job, klass, mine))
        if self.explain:
            self._entry(job, position, WaitCode.PREEMPTING, _preempting_message(plan.victims, klass), reserved_start=now)
        return True

    def _victim_index(self, cap: PoolCapacity) -> VictimIndex:
        # Only runs that stand below someone waiting can ever be chosen (reclaiming aside).
        top, standings = self.top_standing, self.run_standing
        candidates = self.borrowed if self.policy.reclaim_borrowed else [r for r in self.borrowed if standings[r.id] < top]
        return VictimIndex(
            cap,
            candidates,
            [r for r in self.running if r.stopping],
            self.now,
            per_preemption_s=self.policy.victim_preemption_cost_s,
        )

    def _preemption(self, victim: RunningJob, job: QueuedJob, klass: PriorityClass, mine: int) -> Preemption:
        """The decision to stop `victim` for `job`, with why it may be stopped."""
        if victim.priority_class < klass:
            kind = PreemptionKind.LOWER_CLASS
            reason = (
                f"lower class: run {victim.id} ({victim.priority_class.label}, team {victim.team}) is beyond "
                f"its team's guarantee and makes room for {klass.label} job {job.id}"
            )
        elif self.run_standing.get(victim.id, mine) < mine:
            kind = PreemptionKind.DEMOTED
            ran = service_words(victim.service(self.now), victim.devices, self.policy)
            if job.attained_s > 0:
                who = f"job {job.id}, which has run for {service_words(job.attained_s, job.devices, self.policy)}"
            else:
                who = f"new job {job.id}"
            reason = (
                f"demoted: run {victim.id} (team {victim.team}) has run for {ran} in all, more than pool "
                f"{self.pool}'s {threshold_words(self.policy)}, and is beyond its team's guarantee; the job "
                f"that has run less goes first, so it makes room for {who}, and resumes from its latest checkpoint"
            )
        else:
            kind = PreemptionKind.RECLAIMED
            reason = (
                f"borrowed devices reclaimed: run {victim.id} ({victim.priority_class.label}, team {victim.team}) "
                f"is beyond its team's guarantee and makes room for {klass.label} job {job.id}"
            )
        return Preemption(
            victim_id=victim.id,
            for_job_id=job.id,
            reason=reason,
            work_lost_device_s=victim.work_at_risk(self.now),
            kind=kind,
        )

    # -- reasons ----------------------------------------------------------------------------

    def _entry(
        self, job: QueuedJob, position: int, code: WaitCode, message: str, reserved_start: float | None = None
    ) -> None:
        if self.explain:
            self.entries.append(QueueEntry(job.id, self.pool, position, code, message, reserved_start))

    def _no_hardware(self, job: QueuedJob, position: int, cap: PoolCapacity) -> None:
        if not self.explain:
            return
        largest = max((t for i, t in enumerate(cap.total) if cap.ready[i]), default=0)
        if not any(cap.ready):
            # Not a size problem: every node is draining, lost or offline.
            msg = f"No node in pool {self.pool} is taking new runs now (every one is draining, lost or offline)."
        elif job.devices_per_node > largest:
            msg = (
                f"No ready node in pool {self.pool} has {plural(job.devices_per_node, 'device')} "
                f"(the largest has {largest})."
            )
        elif cap.ready_nodes_with_total(job.devices_per_node) >= job.nodes:
            msg = self._too_big(job, cap)
        else:
            have = cap.ready_nodes_with_total(job.devices_per_node)
            msg = (
                f"The job needs {job.nodes} nodes with {plural(job.devices_per_node, 'device')} each; pool "
                f"{self.pool} has {plural(have, 'such ready node')}."
            )
        self._entry(job, position, WaitCode.NO_HARDWARE, msg)

    def _too_big(self, job: QueuedJob, cap: PoolCapacity) -> str:
        """Why a job whose devices some nodes have still fits on none: their memory or CPU cores."""
        _, d, memory, cpus = job.shape
        have = [i for i, t in enumerate(cap.total) if cap.ready[i] and t >= d]
        if memory and cap.ready_nodes_with_total(d, memory) < job.nodes:
            need, what, most = _gib(memory) + " of memory", "memory", _gib(max(cap.mem_total[i] for i in have))
        else:
            need, what, most = _plural_cores(cpus), "CPU cores", _cores(max(cap.cpu_total[i] for i in have))
        if job.nodes == 1:
            return (
                f"No ready node in pool {self.pool} has {need} for {plural(d, 'device')} "
                f"(the most {what} of any such node is {most})."
            )
        count = cap.ready_nodes_with_total(d, memory, cpus)
        return (
            f"The job needs {job.nodes} nodes with {plural(d, 'device')} and {need} each; pool {self.pool} "
            f"has {plural(count, 'such ready node')}."
        )

    def _short_of(self, job: QueuedJob, cap: PoolCapacity) -> tuple[WaitCode, str] | None:
        """Memory or CPU cores, when they, not devices, keep the job from starting now."""
        nodes, d, memory, cpus = job.shape
        if not (memory or cpus) or cap.find(nodes, d, INF, honour_reservations=False) is None:
            return None
        if cap.find(nodes, d, INF, honour_reservations=False, memory=memory) is None:
            code, what, need = WaitCode.MEMORY, "memory", f"{_gib(memory)} of memory"
            free = _gib(cap.most_free_beside(d)[0])
        elif cap.find(nodes, d, INF, honour_reservations=False, memory=memory, cpus=cpus) is None:
            code, what, need = WaitCode.CPUS, "CPU cores", _plural_cores(cpus)
            free = _cores(cap.most_free_beside(d)[1])
        else:
            return None
        where = "a node" if nodes == 1 else f"each of {nodes} nodes"
        return code, (
            f"Waiting for {what}: devices are free, but it needs {need} on {where} with "
            f"{plural(d, 'free device')}; the most free on such a node now is {free}."
        )

    def _head(self, job: QueuedJob, position: int, start: float | None, cap: PoolCapacity) -> None:
        # No clock here: the reservation counts predicted runtimes, while the estimate shown beside
        # this reason counts the live ETA of the running runs; two times for one start would disagree.
        when = "" if start is None else " Devices are reserved for it: it starts next, as running runs end (see its estimated start)."
        if demoted(job, self.policy, self.now):
            when += f" It has run for {hours_minutes(job.attained_s)} in all and resumes from its latest checkpoint."
        short = self._short_of(job, cap)
        if short is not None:
            self._entry(job, position, short[0], short[1] + when, start)
        elif job.nodes > 1:
            ready = cap.count_free_at_least(job.devices_per_node)
            msg = (
                f"Waiting for {job.nodes} nodes with {job.devices_per_node} free devices at once; "
                f"{ready} such nodes are free now.{when}"
            )
            self._entry(job, position, WaitCode.GANG, msg, start)
        else:
            msg = f"Next in line for {plural(job.devices_per_node, 'device')} on one node in pool {self.pool}.{when}"
            self._entry(job, position, WaitCode.RESOURCES, msg, start)

    def _behind(
        self,
        job: QueuedJob,
        klass: PriorityClass,
        position: int,
        blockers: list[_Blocker],
        fair_share: dict[str, float],
        cap: PoolCapacity | None = None,
    ) -> None:
        if not self.explain:
            return
        first = blockers[0] if blockers else None
        ahead = first.job.id if first is not None else "earlier jobs"
        _, _, memory, cpus = job.shape
        if cap is not None and cap.find(job.nodes, job.devices_per_node, INF, honour_reservations=False, memory=memory, cpus=cpus):
            msg = (
                "Devices are free, but by its predicted runtime this job would delay the reserved "
                f"start of job {ahead}."
            )
            self._entry(job, position, WaitCode.BACKFILL_TOO_LONG, msg)
            return
        short = self._short_of(job, cap) if cap is not None else None
        if short is not None:
            self._entry(job, position, short[0], short[1])
            return
        if demoted(job, self.policy, self.now):
            msg = (
                f"It has run for {service_words(job.attained_s, job.devices, self.policy)} in all, more than pool "
                f"{self.pool}'s {threshold_words(self.policy)}: jobs that have run less go first. "
                "It resumes from its latest checkpoint."
            )
            self._entry(job, position, WaitCode.DEMOTED, msg)
            return
        if first is not None and first.effective > klass:
            msg = f"Waiting behind {first.effective.label}-priority job {ahead} and others ahead of it."
            self._entry(job, position, WaitCode.HIGHER_PRIORITY, msg)
            return
        mine = fair_share.get(job.team, 1.0)
        if first is not None and first.job.team != job.team and fair_share.get(first.job.team, 1.0) > mine:
            msg = (
                f"Team {job.team} used more than its share of pool {self.pool} recently; jobs of teams "
                f"with less recent use go first (position {position})."
            )
            self._entry(job, position, WaitCode.FAIR_SHARE, msg)
            return
        msg = f"Position {position} in pool {self.pool}; waiting behind job {ahead} and others ahead of it."
        self._entry(job, position, WaitCode.IN_LINE, msg)

    def _fragmentation(
        self, cap: PoolCapacity, ordered: Sequence[QueuedJob], hardware: dict[Shape, bool]
    ) -> Fragmentation:
        placed = {p.job_id for p in self.placements}
        waiting_shapes = sorted(
            {
                (j.nodes, j.devices_per_node)
                for j in ordered
                if j.id not in placed and j.blocked_reason is None and hardware.get(j.shape)
            }
        )
        free_total = cap.free_sum
        if waiting_shapes:
            fits = [d for k, d in waiting_shapes if cap.count_free_at_least(d) >= k]
            smallest = min(fits) if fits else cap.max_devices + 1
            usable = sum(f for i, f in enumerate(cap.free) if cap.ready[i] and f >= smallest)
        else:
            # Nothing is waiting, so idle devices are idle, not stranded.
            usable = free_total
        return Fragmentation(
            pool=self.pool,
            free_devices=free_total,
            usable_free_devices=usable,
            stranded_devices=free_total - usable,
            whole_free_nodes=cap.whole_free_nodes(),
            largest_free_block=cap.max_free(),
        )


def _gib(memory: float) -> str:
    """Bytes as GiB for a reason ("6 GiB", "1.5 GiB")."""
    return f"{max(0.0, memory) / 2**30:.4g} GiB"


def _cores(cpus: float) -> str:
    return f"{max(0.0, cpus):.4g}"


def _plural_cores(cpus: float) -> str:
    return f"{_cores(cpus)} CPU core" + ("" if cpus == 1 else "s")


def _preempting_message(victims: Sequence[RunningJob], klass: PriorityClass) -> str:
    if not victims:
        return "Waiting for runs that are already stopping to release their devices."
    if all(v.priority_class < klass for v in victims):
        which = plural(len(victims), "lower-priority run")
    else:
        which = plural(len(victims), "run") + " (of lower priority, or that have run longer than it)"
    return f"Stopping {which} to make room; starts when they have stopped."


def _fair_share(
    policy: Policy, queued: Sequence[QueuedJob], usage: dict[str, float], guarantees: dict[str, int]
) -> dict[str, float]:
    if policy.ordering != Ordering.PRIORITY or policy.fair_share_weight <= 0:
        return {}
    return fair_share_factors({j.team for j in queued} | set(usage), usage, guarantees)


def _by_pool(state: ClusterState) -> tuple[dict[str, list[RunningJob]], dict[str, list[QueuedJob]], dict[str, dict[str, float]]]:
    running: dict[str, list[RunningJob]] = defaultdict(list)
    queued: dict[str, list[QueuedJob]] = defaultdict(list)
    # One pool is the common case (and the simulator's): skip the per-job loop then.
    pools = {run.pool for run in state.running} | {job.pool for job in state.queued}
    if len(pools) == 1:
        (only,) = pools
        if state.running:
            running[only] = list(state.running)
        if state.queued:
            queued[only] = list(state.queued)
    else:
        for run in state.running:
            running[run.pool].append(run)
        for job in state.queued:
            queued[job.pool].append(job)
    usage: dict[str, dict[str, float]] = defaultdict(dict)
    for use in state.usage:
        usage[use.pool][use.team] = usage[use.pool].get(use.team, 0.0) + use.device_seconds
    return running, queued, usage


def queue_keys(state: ClusterState) -> dict[str, list[OrderKey]]:
    """Each pool's order keys (unsorted; smaller goes first), without placing anything."""
    running, queued, usage = _by_pool(state)
    keys: dict[str, list[OrderKey]] = {}
    for pool in sorted(queued):
        policy = state.policies.get(pool, state.default_policy)
        guarantees = guarantees_by_team(state.quotas, pool)
        keys[pool] = order_keys(
            queued[pool],
            now=state.now,
            policy=policy,
            held=team_usage_devices(running.get(pool, [])),
            guarantees=guarantees,
            fair_share=_fair_share(policy, queued[pool], usage.get(pool, {}), guarantees),
        )
    return keys


def queue_order(state: ClusterState) -> dict[str, list[QueuedJob]]:
    """Each pool's queue in scheduling order, without placing anything (cheap: no capacity)."""
    return {pool: [item[5] for item in sorted(keyed)] for pool, keyed in queue_keys(state).items()}


def deadlines_due(state: ClusterState) -> dict[str, float]:
    """Virtual deadlines for the queued jobs that have none yet, as their pool's rules give now.

    Callers fix them on the jobs (the portal stores them on the run, the simulator on its
    queue) before the pass: from then on a job's place in line no longer depends on later
    runtime predictions or on fair share moving, only on what arrives ahead of it. Pools
    ordered FIFO rank by submission time and need none.
    """
    _, queued, usage = _by_pool(state)
    due: dict[str, float] = {}
    for pool, jobs in queued.items():
        policy = state.policies.get(pool, state.default_policy)
        if policy.ordering != Ordering.PRIORITY:
            continue
        fresh = [j for j in jobs if j.deadline is None]
        if not fresh:
            continue
        fair_share = _fair_share(policy, jobs, usage.get(pool, {}), guarantees_by_team(state.quotas, pool))
        for job in fresh:
            due[job.id] = virtual_deadline(job, policy, fair_share.get(job.team, 1.0))
    return due


def _dominated(shape: Shape, mine: int, failed: list[tuple[Shape, int]]) -> bool:
    """Whether a plan for `shape` at standing `mine` must fail as one in `failed` did.

    Within a pass capacity only shrinks, reservations and held nodes only grow, and the runs
    taken only grow (first claims aside, hence none in `failed`); a standing no higher finds a
    subset of the victims (its class is no higher either), and a gang at least as large in
    nodes, devices, memory and cores per node needs more of them on more nodes."""
    nodes, devices, memory, cpus = shape
    return any(
        mine <= m and nodes >= s[0] and devices >= s[1] and memory >= s[2] and cpus >= s[3] for s, m in failed
    )


def _drain(heap: list[OrderKey]) -> Iterator[OrderKey]:
    while heap:
        yield heapq.heappop(heap)


def _unknown_pool(pool: str, queued: Sequence[QueuedJob]) -> list[QueueEntry]:
    """Jobs for a pool without nodes wait in submission order, saying so."""
    return [
        QueueEntry(job.id, pool, position, WaitCode.NO_POLICY, f"Pool {pool} has no nodes registered.")
        for position, job in enumerate(sorted(queued, key=lambda j: (j.submitted_at, j.id)), 1)
    ]


def schedule(state: ClusterState, *, explain: bool = True) -> Decision:
    """One scheduling pass over every pool.

    `explain=False` skips the per-job reasons and fragmentation figures (the simulator and
    estimator do not need them); placements, preemptions and order are the same either way.
    """
    nodes_by_pool: dict[str, list[Node]] = defaultdict(list)
    free_by_pool: dict[str, int] = defaultdict(int)
    for node in state.nodes:
        nodes_by_pool[node.pool].append(node)
        if node.state == NodeState.READY:
            free_by_pool[node.pool] += max(0, node.free_devices)
    if not explain and all(free_by_pool[pool] == 0 for pool in nodes_by_pool):
        movable = {r.pool for r in state.running if r.preemptible and not r.stopping}
        if not any(pool in movable and state.policies.get(pool, state.default_policy).preemption for pool in nodes_by_pool):
            # Every pool is full and nothing may be preempted: no decision is possible, and
            # without reasons to give there is no need to even look at the queue.
            return Decision(placements=(), preemptions=(), queue=(), fragmentation=())
    running_by_pool, queued_by_pool, usage_by_pool = _by_pool(state)

    placements: list[Placement] = []
    preemptions: list[Preemption] = []
    entries: list[QueueEntry] = []
    fragmentation: list[Fragmentation] = []
    order: dict[str, tuple[str, ...]] = {}
    for pool in sorted(set(nodes_by_pool) | set(queued_by_pool)):
        if pool not in nodes_by_pool and explain:
            entries.extend(_unknown_pool(pool, queued_by_pool[pool]))
            continue
        work = _PoolPass(
            pool=pool,
            now=state.now,
            policy=state.policies.get(pool, state.default_policy),
            nodes=nodes_by_pool.get(pool, []),
            running=running_by_pool.get(pool, []),
            queued=queued_by_pool.get(pool, []),
            quotas=state.quotas,
            usage=usage_by_pool.get(pool, {}),
            explain=explain,
        )
        work.run()
        placements.extend(work.placements)
        preemptions.extend(work.preemptions)
        if explain:
            order[pool] = work.order
            entries.extend(sorted(work.entries, key=lambda e: e.position))
            if work.fragmentation is not None:
                fragmentation.append(work.fragmentation)
    return Decision(
        placements=tuple(placements),
        preemptions=tuple(preemptions),
        queue=tuple(entries),
        fragmentation=tuple(fragmentation),
        order=order,
    )
