"""Plain data the scheduler core takes in and hands back.

Everything here is a frozen, slotted dataclass or an enum, so the Django side can build the
state from rows, the simulator can build it from a trace, and neither can mutate what the core
is looking at. Times are seconds on any clock the caller likes (epoch seconds in the portal,
trace seconds in the simulator); only differences between them matter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class PriorityClass(IntEnum):
    """Ordered so that a larger value outranks a smaller one."""

    LOW = 0
    NORMAL = 1
    URGENT = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class NodeState(StrEnum):
    READY = "ready"
    # A draining node keeps its running work but takes nothing new.
    DRAINING = "draining"
    # A lost node holds nothing the scheduler can use; its runs are requeued elsewhere.
    LOST = "lost"


class Ordering(StrEnum):
    # Class first, then submission time: the baseline everyone understands.
    FIFO = "fifo"
    # Class (with aging), then guarantee, then the virtual deadline (size and fair share).
    PRIORITY = "priority"


class Packing(StrEnum):
    # Tightest node first, so whole nodes stay free for wide gangs.
    BEST_FIT = "best_fit"
    # Lowest node id first: simple and predictable, but scatters small jobs.
    FIRST_FIT = "first_fit"


class PreemptionKind(StrEnum):
    # The victim is of a lower class than the job it makes room for.
    LOWER_CLASS = "lower_class"
    # Same class, but demoted for its service (`Policy.demote_after_s`) below the job.
    DEMOTED = "demoted"
    # Same class, beyond its guarantee, reclaimed for a job inside its own (`reclaim_borrowed`).
    RECLAIMED = "reclaimed"


# QueuedJob.blocked_reason of a run waiting out its backoff after an infrastructure failure.
RETRY_BACKOFF = "retry_backoff"


class WaitCode(StrEnum):
    """Why a queued job is not running. Values are stable: the API and pages show them."""

    PLACED = "placed"
    BUDGET = "budget"
    QUOTA = "quota"
    NO_HARDWARE = "no_hardware"
    NO_POLICY = "unknown_pool"
    GANG = "waiting_for_gang"
    RESOURCES = "waiting_for_resources"
    PREEMPTING = "preempting"
    HIGHER_PRIORITY = "behind_higher_priority"
    FAIR_SHARE = "fair_share"
    IN_LINE = "behind_earlier_jobs"
    BACKFILL_TOO_LONG = "would_delay_reserved_job"
    HEADROOM = "headroom_kept_for_short_jobs"
    # It has run longer than the pool's demotion threshold: runs that have run less go first.
    DEMOTED = "ran_longer_than_others"
    # Requeued after an infrastructure failure: it waits out its backoff before it is placed.
    RETRY_BACKOFF = "retrying_after_failure"
    # Enough devices are free, but no node with them has the memory (or CPU cores) it asks for.
    MEMORY = "waiting_for_memory"
    CPUS = "waiting_for_cpus"


# Waits with no estimated start anywhere (API, queue page, CLI, forecast): what ends them is not
# a run ending (money, or hardware the pool does not have), so no replay of the line can say when.
UNESTIMATED = frozenset({WaitCode.BUDGET, WaitCode.NO_HARDWARE, WaitCode.NO_POLICY})


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    pool: str
    total_devices: int
    free_devices: int
    state: NodeState = NodeState.READY
    # Memory and CPU cores the node offers jobs; 0: not known, so not a limit. What is free is the
    # total less what the runs on the node ask for (`PoolCapacity`).
    memory_bytes: int = 0
    cpus: float = 0.0


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A run that holds devices now.

    `allocation` lists (node id, devices) for every node of the attempt. `predicted_end` is
    when the runtime predictor expects it to finish; the core only uses it for reservations and
    estimates, never to stop anything. `stopping` marks runs already told to stop (preempted or
    cancelled) whose devices will come back soon; they are never chosen as victims twice.
    """

    id: str
    team: str
    pool: str
    priority_class: PriorityClass
    allocation: tuple[tuple[str, int], ...]
    started_at: float
    predicted_end: float
    preemptible: bool = True
    last_checkpoint_at: float | None = None
    progress: float | None = None
    stopping: bool = False
    # For a stopping run: the waiting job it was preempted for, which has first claim on the
    # devices it frees. Without it a job ahead in line took them for free, and the job told it
    # would start once they had stopped stopped more runs elsewhere instead (issue 28).
    stopping_for: str | None = None
    # Where wait estimates take it to end when that is not `predicted_end` (None): its live ETA,
    # the run page's figure. Not the history's mean: replayed on the trace, means put the ends
    # of the runs in front too late and the estimates of runs that waited were right half as often.
    expected_end: float | None = None
    # Seconds it ran in earlier attempts (wall clock, however many devices), before this one
    # started: with the current attempt's time, its attained service (`Policy.demote_after_s`).
    attained_s: float = 0.0
    # Times it was preempted so far (`Policy.max_preemptions`).
    preemptions: int = 0
    # For a caller that knows how often a run checkpoints rather than when it last did (the
    # trace simulator): a checkpoint every this many seconds of the attempt.
    checkpoint_every_s: float | None = None
    # What it holds per device of its allocation besides the device (0: nothing asked).
    memory_per_device: int = 0
    cpus_per_device: float = 0.0
    # Derived once: passes read it for every run, many times.
    devices: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", sum(count for _, count in self.allocation))

    def service(self, now: float) -> float:
        """Seconds it has run in all, this attempt included."""
        return self.attained_s + max(0.0, now - self.started_at)

    def work_at_risk(self, now: float) -> float:
        """Device-seconds lost if stopped now: work since the latest checkpoint (or start)."""
        since = self.started_at if self.last_checkpoint_at is None else max(self.last_checkpoint_at, self.started_at)
        every = self.checkpoint_every_s
        if every is not None and every > 0 and now > self.started_at:
            since = max(since, self.started_at + every * math.floor((now - self.started_at) / every))
        return max(0.0, now - since) * self.devices


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A run waiting for devices: a gang of `nodes` nodes with `devices_per_node` each.

    `blocked_reason`/`blocked_message` come from outside the scheduler (budget exhausted, held
    by a user); such a job is listed with that reason and never placed.
    """

    id: str
    team: str
    pool: str
    priority_class: PriorityClass
    submitted_at: float
    nodes: int
    devices_per_node: int
    predicted_runtime: float
    preemptible: bool = True
    blocked_reason: str | None = None
    blocked_message: str = ""
    # Expected runtime (the history's mean): what the fluid guess of a wait adds up; the core
    # and the estimate's replay go by `predicted_runtime`. None means `predicted_runtime`.
    expected_runtime: float | None = None
    # The virtual deadline (see `policies.virtual_deadline`), fixed once when the job first
    # meets a priority-ordered pass (`core.deadlines_due`) and kept from then on, also across a
    # requeue. Fixed, so a later runtime prediction or a change in fair share never moves a
    # job in line and the line only moves forward. None: not fixed yet (computed per pass).
    deadline: float | None = None
    # Seconds it already ran in earlier attempts (a preempted or requeued run): its attained
    # service, which decides whether it is demoted (`Policy.demote_after_s`).
    attained_s: float = 0.0
    # Times it was preempted so far (`Policy.max_preemptions`).
    preemptions: int = 0
    # When it last went back in line and how long (seconds) its last attempt ran, for the
    # starvation guard (`Policy.starve_factor`). None: it never ran.
    requeued_at: float | None = None
    last_run_s: float = 0.0
    # An attempt of it was placed before, whether or not it ran (a start that failed, a node lost
    # before the start): it is back in line, and its estimates are a requeue's
    # (`estimate.WaitCalibration.job_key`, as the portal files its estimate rows).
    placed_before: bool = False
    # Nodes suspected of an infrastructure failure of this run: not used while others can host it.
    avoid_nodes: frozenset[str] = frozenset()
    # Memory (bytes) and CPU cores it asks per device, on top of the device; 0: no such request.
    memory_per_device: int = 0
    cpus_per_device: float = 0.0
    devices: int = field(init=False, repr=False, compare=False)
    # (nodes, devices, memory, CPU cores per node): jobs of one shape fit the same places.
    # Derived once, like `devices`: a pass reads it several times per waiting job.
    shape: tuple[int, int, int, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        d = self.devices_per_node
        object.__setattr__(self, "devices", self.nodes * d)
        object.__setattr__(self, "shape", (self.nodes, d, self.memory_per_device * d, self.cpus_per_device * d))


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """Devices a team is guaranteed in a pool, plus how many more it may borrow.

    Borrowing only ever uses devices that are idle; `borrow_limit=None` means no cap beyond the
    pool's size. A team without a quota row in a pool has a guarantee of 0 and may borrow freely.
    """

    team: str
    pool: str
    guaranteed_devices: int
    borrow_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """Per-pool rules. The defaults are the full Trainyard policy; see `explain_policy`."""

    ordering: Ordering = Ordering.PRIORITY
    backfill: bool = True
    preemption: bool = True
    packing: Packing = Packing.BEST_FIT
    # How many blocked jobs at the front get a reservation that backfill must not delay.
    # 1 is classic EASY backfill.
    reserve_depth: int = 1
    # Jobs that fit inside their team's guarantee go before jobs that would borrow.
    guarantee_first: bool = False
    # Aging between classes: a low job is treated as normal after waiting this long.
    class_promotion_s: float = 12 * 3600.0
    # Within a class (and tier), the earliest virtual deadline goes first:
    #   submitted_at + stretch * size / fair_share_factor ** fair_share_weight
    # where size is the predicted runtime (at least `min_runtime_s`) times devices raised to
    # `width_exponent`. Short, narrow jobs get near deadlines and go first; a long job's deadline
    # is fixed, so later arrivals eventually rank behind it and nothing starves.
    stretch: float = 6.0
    fair_share_weight: float = 0.1
    width_exponent: float = 0.5
    min_runtime_s: float = 60.0
    # Half-life of the usage history that fair share looks at. The caller decays usage with it
    # (see `decay_usage`); the core only reads it to explain itself.
    fair_share_half_life_s: float = 3 * 24 * 3600.0
    # Also reclaim borrowed devices (other teams' runs beyond their guarantee) for a job that
    # fits inside its own team's guarantee, whatever the classes.
    reclaim_borrowed: bool = False
    # Headroom for short work: a job predicted to run longer than `headroom_max_runtime_s` may
    # not take the pool's last `headroom_devices` free devices, so short jobs can start on
    # arrival even when the pool is busy (0 turns it off).
    headroom_devices: int = 0
    headroom_max_runtime_s: float = 2 * 3600.0
    # Least attained service (Tiresias' answer to runtimes nobody can predict): a normal or low
    # run that has run this long in all, over every attempt, is demoted. Running, it stands below
    # the jobs of its class that have not been demoted, so such a job that cannot start otherwise
    # may preempt it (if it is preemptible and beyond its team's guarantee, as any preemption);
    # waiting, it sits behind every job of its class that has not been demoted, and among demoted
    # jobs the one that has run least goes first. A class still outweighs service. Short
    # jobs, most of them, then start at once and finish without waiting behind long ones; long
    # ones take turns, each resuming from its checkpoint. Urgent runs are never demoted, and
    # aging never promotes a demoted job (it is not starving: it has run). 0 turns it off.
    demote_after_s: float = 3600.0
    # Demoted jobs sit at levels: 1 up to demote_after_s x this factor of service, 2 up to
    # x factor², and so on. A job waiting at a level may preempt (beyond guarantees, as always)
    # runs that reached a deeper one, so a demoted gang that ran an hour is not kept waiting for
    # weeks behind narrow runs that have run for days. 1 or less: one level, no such preemption.
    demotion_factor: float = 4.0
    # At most this many demoted levels (0: no limit); the last holds every longer run, so runs
    # that reached it stop one another no more. With `demoted_fifo`, the oldest of them resumes
    # first: Tiresias' K queues. Off by default: at 4 with FIFO, p99 JCT under backfill's on 4 of
    # the 7 trace samples (1 by default), but Jain's index 0.83 on the trace (0.90; issue 28).
    demotion_levels: int = 0
    # A demoted run is not stopped for a job of its own class in the first this-many seconds of
    # an attempt, so a run that has just resumed (and paid its restart) gets to make progress.
    demoted_min_attempt_s: float = 900.0
    # A run preempted this many times is not stopped again but for an urgent job, so no run is
    # stopped more often than this for service or borrowing (the replays' tail: issue 28). 0 turns
    # it off, the default: at 10 it cut the trace replay's Jain index from 0.92 to 0.35, below
    # FIFO's 0.47 (capped gangs hold devices that short runs of other teams wait for).
    max_preemptions: int = 0
    # Starvation guard (Tiresias' STARVELIMIT): a demoted job that has waited, since it last
    # went back in line, this many times as long as its last attempt ran (at least
    # `demoted_min_attempt_s`) competes again as a job that was never demoted: by its fixed
    # deadline, and it may preempt demoted runs (`policies.starved`). 0 turns it off, the
    # default: at 4 it more than doubled the trace replay's avg JCT and cut Jain's index from
    # 0.92 to 0.25-0.41 on every sample (docs/scheduler-replays.md), so a pool must ask for it.
    starve_factor: float = 0.0
    # 2-D least attained service (Tiresias): service counts device-seconds, so a run on 64
    # devices reaches `demote_after_s` (then read as device-seconds) 64 times sooner than one on
    # a single device, which behaves as before. A run's width is fixed across its attempts, so
    # its device-seconds are its seconds (`attained_s`) times its devices (`policies.service`).
    # Off by default: on the development trace it cut Jain's index from 0.92 to 0.62 (issue 28).
    service_per_device: bool = False
    # A run preempted n times may not be stopped again for a job of its own class in the first
    # `demoted_min_attempt_s` x this ** n seconds of an attempt: each turn is longer than the
    # last, so a run is stopped O(log(runtime)) times without ever becoming immovable. 1: a
    # fixed minimum (`policies.min_attempt`). Off by default: at 2, 4 and 8 (after 4) it held
    # every job of the development trace to 7-12 preemptions but cut Jain's index to 0.18-0.28.
    min_attempt_growth: float = 1.0
    # The growth starts after this many preemptions: the first ones, which most stopped runs
    # never pass, keep the fixed minimum and leave whole nodes free for wide jobs to take.
    min_attempt_growth_after: int = 0
    # Tiresias' discretized queues: waiting demoted jobs of one level go in order of submission
    # (FIFO inside a queue) rather than least service first, so a demoted job that resumes never
    # overtakes, and then stops, one of its level that has run a little longer. Off by default:
    # with one level it gave the trace replay's only p99 JCT under backfill's (0.87x) but 2.3x the
    # default's avg JCT, Jain's index 0.39 and 107 stops of one run (docs/scheduler-replays.md).
    demoted_fifo: bool = False
    # With the starvation guard on, whether a starved job may also preempt demoted runs (True, as
    # before) or only regains its place in line, ahead of the demoted queue and by its fixed
    # deadline among undemoted jobs, taking devices as they come free (False: no churn of
    # demoted runs stopping one another).
    starved_preempt: bool = True
    # Choosing victims, each earlier preemption of a run counts as this many device-seconds of work
    # lost (`RunningJob.work_at_risk`), so the stops spread over many runs instead of landing on
    # the same few. 0: work lost only (the default: with the cap, more runs reach it, and Jain's
    # index fell from 0.35 to 0.22 on the trace replay).
    victim_preemption_cost_s: float = 0.0
    # With the cap (`max_preemptions`), a run that reached it (it will not be stopped again) starts
    # on the nodes already holding such runs where it fits there, and best fit elsewhere only when
    # it does not: immovable runs share few nodes, and whole nodes stay clearable for wide gangs.
    # Off by default: beside the cap of 10 alone, Jain's index on the trace was 0.33 (0.35 without
    # it): the short work of every team waits under the cap, not only the gangs (issue 28).
    pack_capped: bool = False
    # With the cap, the most of the pool's ready devices that runs which reached it may hold at
    # once (0: no limit). Such a run will not be stopped again, so beyond this share one that
    # reached the cap waits (it is not stopped for it) and the rest of the pool stays movable:
    # new short jobs can still start at once by stopping demoted runs below the cap.
    # Off by default: on the development trace with the cap of 10 and `pack_capped`, 0.3 raised
    # Jain's index from 0.33 to 0.49, 0.15 to 0.56 but doubled p99 JCT (capped runs wait); 0.85 was
    # met by none of 0.1-0.5 (issue 28).
    capped_share: float = 0.0
    # With the cap, waiting runs that reached it go first among the demoted (they stand, for
    # preempting, at their service's level as before): a long run stopped that often resumes soon
    # and then runs to its end, instead of waiting behind every run with less service (the tail).
    # Off by default: with the cap, `pack_capped` and a share of 0.3, p99 JCT 1.17x backfill's on
    # the trace (0.94-1.29x over the variants), Jain's index 0.42-0.70: short of 0.85 (issue 28).
    capped_first: bool = False
    # A new run's first estimated start is kept as a promise: where it is earlier than the run's
    # deadline it becomes its deadline, so runs submitted later go behind it unless their own
    # deadline is earlier still (under least attained service, later short work overtaking a
    # waiting run made it wait a median 4x its estimate). The replay's raw figure, before the
    # learned correction, is the promise: that is the line the replay saw. Ordered pools only.
    # On by default: of the runs that waited over 10 minutes, the share started within the window
    # of their estimate rose on four of the trace replay's seven samples (43.7% to 56.5% on the
    # trace), stayed on two and fell on 60 nodes; avg JCT moved by 1.3% at most (docs/scheduler-replays.md).
    promise_estimates: bool = True


@dataclass(frozen=True, slots=True)
class TeamUsage:
    """Decayed device-seconds a team used recently in a pool (input to fair share)."""

    team: str
    pool: str
    device_seconds: float


@dataclass(frozen=True, slots=True)
class ClusterState:
    now: float
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    queued: tuple[QueuedJob, ...] = ()
    quotas: tuple[TeamQuota, ...] = ()
    usage: tuple[TeamUsage, ...] = ()
    policies: Mapping[str, Policy] = field(default_factory=dict)
    # Used for any pool without its own entry.
    default_policy: Policy = Policy()


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: str
    pool: str
    allocation: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_id: str
    for_job_id: str
    reason: str
    work_lost_device_s: float
    # Why the victim may be stopped, for callers that word it their own way (`reason` is the
    # core's own sentence, which names the other team's job).
    kind: PreemptionKind


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One queued job's standing after the pass. Placed jobs are listed too (code PLACED)."""

    job_id: str
    pool: str
    position: int
    code: WaitCode
    message: str
    reserved_start: float | None = None


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """Free devices after the pass, and how many of them no queued shape can use."""

    pool: str
    free_devices: int
    usable_free_devices: int
    stranded_devices: int
    whole_free_nodes: int
    largest_free_block: int

    @property
    def stranded_ratio(self) -> float:
        return self.stranded_devices / self.free_devices if self.free_devices else 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    placements: tuple[Placement, ...]
    preemptions: tuple[Preemption, ...]
    # Every queued job, in pool order (empty when the pass ran with explain=False).
    queue: tuple[QueueEntry, ...]
    fragmentation: tuple[Fragmentation, ...]
    # Pool -> job ids in scheduling order (empty when the pass ran with explain=False).
    order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
