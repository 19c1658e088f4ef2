"""Reads for the queue page and API: who waits where and why, when they should start, how good
those estimates have been, and how full and fragmented each pool was.

Pools are shared, so anyone signed in sees every pool's line; what a run is (id, name, project,
parameters, the detailed reason) is shown only to its own team. Others see the team's name, the
class, the size and the predicted runtime: enough to know who is ahead and by how much.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, QuerySet
from django.utils import timezone

from apps.core.text import fmt_duration, plural
from apps.nodes.closed import open_pools
from apps.nodes.models import NodePool, NodeState
from apps.runs.models import Run, RunStatus
from apps.scheduling.estimate import CLOSE_S, close_margin
from apps.scheduling.model import UNESTIMATED, WaitCode
from apps.scheduling.models import EstimateKind, QueueEstimate, SchedulerState, UtilizationSample
from apps.scheduling.outcomes import estimate_requeued
from apps.scheduling.policies import explain_policy
from apps.scheduling.pool_policy import policy_read
from apps.scheduling.predict import RuntimePrediction
from apps.scheduling.snapshot import predict_queued, predictor_load, run_query
from apps.tenants.selectors import AnyUser, team_ids_for_user

ACCURACY_DAYS = 7
# An estimate counts as right when the start fell within this, or a quarter of the wait if longer
# (estimate.close_margin); the words on the page name it.
ACCURACY_FLOOR_S = CLOSE_S
# A start this soon after its estimate was given came from the next pass or the one after (a beat
# is 10 s): the run did not wait, its estimate was right by construction, and it is not scored.
WAITED_MIN_S = 20.0
# Runs that really waited, scored apart: the trace replay's buckets (`trace_replay.WAITED_BUCKETS`,
# kept equal by tests/scheduling/test_accuracy_buckets.py), as API field names.
WAITED_BUCKETS = (("over_10m", 600.0), ("over_1h", 3600.0))
UTILIZATION_HOURS = 24
UTILIZATION_POINTS = 288

REASON_LABELS: dict[str, str] = {
    WaitCode.PLACED: "Starting now",
    WaitCode.BUDGET: "Held: the project's budget is used up",
    WaitCode.QUOTA: "Over its team's device quota in this pool",
    WaitCode.NO_HARDWARE: "No ready node in this pool can take it",
    WaitCode.NO_POLICY: "This pool has no nodes",
    WaitCode.GANG: "Waiting for several nodes to be free at once",
    WaitCode.RESOURCES: "Next in line for devices",
    WaitCode.PREEMPTING: "Stopping runs of lower priority, or that ran longer, to make room",
    WaitCode.HIGHER_PRIORITY: "Behind higher-priority jobs",
    WaitCode.FAIR_SHARE: "Behind teams that used less of the pool recently",
    WaitCode.IN_LINE: "Behind earlier jobs",
    WaitCode.BACKFILL_TOO_LONG: "Too long to slip in before the job at the front",
    WaitCode.HEADROOM: "The last free devices are kept for short jobs",
    WaitCode.DEMOTED: "Has run longer than the jobs ahead of it; resumes from its checkpoint",
    WaitCode.MEMORY: "Waiting for memory: devices are free, but not the memory it asks for",
    WaitCode.CPUS: "Waiting for CPU cores: devices are free, but not the cores it asks for",
}
NOT_YET = "Waiting for the next scheduling pass"
# Why a run has no estimated start (`model.UNESTIMATED`): what must change first. The reason's
# message says exactly what is missing ("needs 2 nodes with 1 device each; pool local has 1 ...").
NO_ESTIMATE: dict[str, str] = {
    WaitCode.BUDGET: "none until the budget allows it",
    WaitCode.NO_HARDWARE: "none: no set of this pool's ready nodes can hold it",
    WaitCode.NO_POLICY: "none: the pool has no nodes",
}
# Reasons that name no other run and no money: every viewer reads the full message.
PUBLIC_MESSAGES = frozenset({WaitCode.NO_HARDWARE, WaitCode.NO_POLICY, WaitCode.MEMORY, WaitCode.CPUS})


def reason_label(code: str) -> str:
    return REASON_LABELS.get(code, NOT_YET if not code else code.replace("_", " ").capitalize())


def run_predicted_runtime(*, run: Run) -> float:
    """Predicted total runtime of the run in seconds, from similar finished runs (never more than
    its max runtime; the max runtime itself when there is no history). For admission and display."""
    predictor = predictor_load(now=timezone.now())
    pred = predictor.predict(run_query(run))
    return float(pred.runtime_s)


def _accuracy_summary(errors: list[float], within: int, days: int, at_once: int = 0) -> dict[str, Any]:
    n = len(errors)
    median = statistics.median(errors) if errors else None
    if n == 0:
        summary = f"No estimates to check yet: no run that waited has started in the last {days} days."
    else:
        summary = (f"{round(100 * within / n)}% of the {n} run{'s' if n != 1 else ''} that waited in the last {days} days "
                   f"started within {fmt_duration(ACCURACY_FLOOR_S)} (or a quarter of their wait, if longer) of the "
                   f"estimate they got at submission; the median error was {fmt_duration(median or 0.0)}.")
    if at_once:
        summary += (f" Not counted: {at_once} run{'s' if at_once != 1 else ''} that started within "
                    f"{fmt_duration(WAITED_MIN_S)} of {'their' if at_once != 1 else 'its'} estimate, without waiting.")
    return {"window_days": days, "runs": n, "within": within, "share": (within / n) if n else None,
            "median_abs_error_s": median, "started_at_once": at_once, "summary": summary}


def _span(seconds: float) -> str:
    """ "10 minutes", "1 hour": a bucket's floor in words (fmt_duration says "60 minutes")."""
    return plural(int(seconds // 3600), "hour") if seconds % 3600 == 0 else fmt_duration(seconds)


@dataclass
class _Tally:
    """The scored estimates of one bucket: absolute errors, how many were close, and how many a
    guess of "starts now" (the estimate's moment itself) would have put as close."""

    errors: list[float] = field(default_factory=list)
    within: int = 0
    starts_now: int = 0
    at_once: int = 0

    def add(self, *, error: float, wait: float) -> None:
        close = close_margin(wait)
        self.errors.append(abs(error))
        self.within += abs(error) <= close
        self.starts_now += wait <= close


def _bucket(tally: _Tally, *, label: str, min_wait_s: float, days: int, requeue: bool = False) -> dict[str, Any]:
    n, within = len(tally.errors), tally.within
    median = statistics.median(tally.errors) if tally.errors else None
    if n == 0:
        text = f"{label}: none in the last {days} days yet."
    else:
        text = (f"{label}: {within} of {n} {'restarted' if requeue else 'started'} within {fmt_duration(ACCURACY_FLOOR_S)} "
                f"(or a quarter of the wait) of {'the new estimate given then' if requeue else 'their estimate'} "
                f"({round(100 * within / n)}%); median error {fmt_duration(median or 0.0)}.")
    if requeue and tally.at_once:
        text += f" Not counted: {tally.at_once} that restarted within {fmt_duration(WAITED_MIN_S)}, without waiting."
    out = {"label": label, "min_wait_s": min_wait_s, "runs": n, "within": within, "share": (within / n) if n else None,
           "median_abs_error_s": median, "starts_now_share": (tally.starts_now / n) if n else None, "summary": text}
    if requeue:
        out["started_at_once"] = tally.at_once
    return out


def estimate_accuracies(*, pools: list[NodePool], days: int = ACCURACY_DAYS, now: datetime | None = None) -> dict[int, dict[str, Any]]:
    """Per pool, how the estimates given when runs entered the queue compared with actual starts
    over the last `days`: one read for all pools (the queue page shows them all).

    Scored as the trace replay scores them (`trace_replay.waited_estimates`): right when the start
    fell within max(10 min, 25% of the wait) of the estimate. The first wait of a run (its
    estimate at submission) is scored overall and in the buckets of runs that waited over 10
    minutes and over an hour (`WAITED_BUCKETS`); the new estimate a preempted or lost
    run got when it went back in line is scored apart, against its restart (`at_requeue`). Only
    runs that waited count: one placed within `WAITED_MIN_S` of its estimate is counted apart."""
    now = now or timezone.now()
    # Recorded after an attempt of the run was placed: the estimate of a requeue, not of the
    # submission (the one definition the lag and the learned correction use too).
    rows = (QueueEstimate.objects.filter(kind=EstimateKind.AT_SUBMISSION, actual_start__gte=now - timedelta(days=days),
                                         error_s__isnull=False, run__pool__in=pools)
            .annotate(requeue=estimate_requeued()))
    first: dict[int, _Tally] = defaultdict(_Tally)
    waited: dict[tuple[int, float], _Tally] = defaultdict(_Tally)
    again: dict[int, _Tally] = defaultdict(_Tally)
    for pool_id, error, recorded, actual, requeue in rows.values_list("run__pool_id", "error_s", "recorded_at",
                                                                       "actual_start", "requeue"):
        if error is None or actual is None:
            continue
        wait = max(0.0, (actual - recorded).total_seconds())
        tally = again[pool_id] if requeue else first[pool_id]
        if wait <= WAITED_MIN_S:
            tally.at_once += 1
            continue
        tally.add(error=error, wait=wait)
        if not requeue:
            for _, floor in WAITED_BUCKETS:
                if wait > floor:
                    waited[pool_id, floor].add(error=error, wait=wait)
    out: dict[int, dict[str, Any]] = {}
    for p in pools:
        overall = first[p.pk]
        summary = _accuracy_summary(overall.errors, overall.within, days, overall.at_once)
        summary["starts_now_share"] = (overall.starts_now / len(overall.errors)) if overall.errors else None
        for name, floor in WAITED_BUCKETS:
            summary[name] = _bucket(waited[p.pk, floor], label=f"Waited over {_span(floor)}", min_wait_s=floor, days=days)
        summary["at_requeue"] = _bucket(again[p.pk], label="Requeued (preempted, or its node failed)",
                                        min_wait_s=WAITED_MIN_S, days=days, requeue=True)
        out[p.pk] = summary
    return out


def estimate_accuracy(*, pool: NodePool, days: int = ACCURACY_DAYS, now: datetime | None = None) -> dict[str, Any]:
    """How the estimates given at submission compared with actual starts, over the last `days`."""
    return estimate_accuracies(pools=[pool], days=days, now=now)[pool.pk]


UTILIZATION_FIELDS = ("at", "total_devices", "used_devices", "free_devices", "stranded_devices", "largest_free_block",
                      "queued_runs", "queued_devices")


def utilization_histories(*, pools: list[NodePool], hours: int = UTILIZATION_HOURS,
                          now: datetime | None = None) -> dict[int, list[dict[str, Any]]]:
    """Per pool, the last `hours` of samples (one a minute), thinned to at most UTILIZATION_POINTS.
    Rows stay tuples until thinned: a day is 1,440 of them per pool, and the page shows 288."""
    now = now or timezone.now()
    recent = UtilizationSample.objects.filter(pool__in=pools, at__gte=now - timedelta(hours=hours)).order_by("pool_id", "at")
    by_pool: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in recent.values_list("pool_id", *UTILIZATION_FIELDS):
        by_pool[row[0]].append(row[1:])
    out: dict[int, list[dict[str, Any]]] = {}
    for p in pools:
        rows = by_pool.get(p.pk, [])
        step = -(-len(rows) // UTILIZATION_POINTS) or 1  # ceil: never more than UTILIZATION_POINTS
        # Thinned from the newest back, so the last point (the page's "now") is the latest sample.
        out[p.pk] = [dict(zip(UTILIZATION_FIELDS, row, strict=True)) for row in rows[::-step][::-1]]
    return out


def _queued(pools: list[NodePool]) -> QuerySet[Run]:
    return (
        Run.objects.filter(status=RunStatus.QUEUED, devices_per_node__gt=0, nodes__gt=0, pool__in=pools)
        # Prefetched, not joined: thousands of waiting runs share a few projects, templates and
        # people, and a joined row made (and JSON-decoded) each of them again per run: most of
        # the page's time at 5,000 runs.
        .prefetch_related("project__team", "template", "pool", "submitted_by")
        .order_by("pool__name", F("queue_position").asc(nulls_last=True), "created_at", "pk")
    )


# Passes run every 10 s (portal/settings/celery.py) and rewrite an estimate once it moves 20 s, so
# the scheduler's current estimate for a run waiting on late runs lags the clock by up to half a
# minute: within this it is due now; further back, no pass has looked since it fell due.
DUE_NOW_S = 60.0
# A last pass older than this many seconds (six missed beats) makes the page's reasons and
# estimates old news, and it says so.
STALE_PASS_S = 60.0


def _until(at: datetime | None, now: datetime) -> str:
    if at is None:
        return ""
    ahead = (at - now).total_seconds()
    if ahead >= 1:
        return f"in {fmt_duration(ahead)}"
    return "due now" if ahead > -DUE_NOW_S else f"was due {fmt_duration(ahead)} ago"


# Runs the scheduler skips until something else changes (money, a quota, a new node): they are
# ahead of a run in the list but not in its way.
HELD = frozenset({WaitCode.BUDGET, WaitCode.QUOTA, WaitCode.NO_HARDWARE, WaitCode.NO_POLICY})
# Predictions made without any finished peer: the figure is the run's time limit or a default.
UNINFORMED = ("template maximum", "no history")


def _runtime_text(prediction: RuntimePrediction) -> str:
    """The predicted runtime in words, saying when it is only the run's limit ("at most 2.0 hours")."""
    if prediction.basis == "template maximum":
        return f"at most {fmt_duration(prediction.runtime_s)} (its limit; no similar run has finished yet)"
    if prediction.basis == "no history":
        return f"about {fmt_duration(prediction.runtime_s)} (a guess; no similar run has finished yet)"
    return f"about {fmt_duration(prediction.runtime_s)}"


def _entry(run: Run, *, position: int, mine: bool, predicted: RuntimePrediction, now: datetime) -> dict[str, Any]:
    unestimated = run.reason_code in UNESTIMATED
    return {
        "position": position,
        "priority": run.priority,
        "team": run.project.team.slug,
        "nodes": run.nodes,
        "devices_per_node": run.devices_per_node,
        "devices": run.nodes * run.devices_per_node,
        "predicted_runtime_s": round(predicted.runtime_s, 1),
        "predicted_runtime_text": _runtime_text(predicted),
        "predicted_from_history": predicted.basis not in UNINFORMED,
        "preemptible": run.preemptible,
        "reason": {
            "code": run.reason_code,
            "label": reason_label(run.reason_code),
            # The detailed message can carry budget figures: only the run's own team reads it.
            "message": (run.status_reason or NOT_YET) if mine or run.reason_code in PUBLIC_MESSAGES
            else reason_label(run.reason_code),
        },
        # A run held for money or missing hardware has no estimate, even one stored before it was held.
        "estimated_start": {"at": None if unestimated else run.estimated_start,
                            "low": None if unestimated else run.estimated_start_low,
                            "high": None if unestimated else run.estimated_start_high,
                            "none_because": NO_ESTIMATE.get(run.reason_code)},
        # In words for the page ("in 40 seconds"): Django's timeuntil says "0 minutes" under a minute.
        "starts_in": "" if unestimated else _until(run.estimated_start, now),
        "waiting_since": run.queued_at or run.created_at,
        "mine": mine,
        "run": {
            "id": run.pk,
            "name": run.name or f"{run.template.slug} #{run.pk}",
            "project": run.project.full_slug,
            "template": run.template.slug,
            "submitted_by": run.submitted_by.get_username() if run.submitted_by else None,
        } if mine else None,
    }


def _ready_nodes(pools: list[NodePool]) -> dict[int, int]:
    # Ready is what the scheduler places on; a draining node takes nothing new.
    rows = (NodePool.objects.filter(pk__in=[p.pk for p in pools], nodes__state=NodeState.READY)
            .annotate(n=Count("nodes")).values_list("pk", "n"))
    return dict(rows)


def queue_list(*, user: AnyUser, pool: str | None = None) -> list[dict[str, Any]]:
    """Per pool, the waiting runs in scheduling order with reasons, estimates and who is ahead."""
    now = timezone.now()
    # A pool that runs nothing (apps.nodes.closed) has no line to wait in.
    pools = list(open_pools() if pool is None else open_pools().filter(name=pool))
    my_teams = set(team_ids_for_user(user=user))
    predictor = predictor_load(now=now)
    accuracy = estimate_accuracies(pools=pools, now=now)
    histories = utilization_histories(pools=pools, now=now)
    ready = _ready_nodes(pools)
    by_pool: dict[int, list[Run]] = defaultdict(list)
    for run in _queued(pools):
        by_pool[run.pool_id].append(run)
    out: list[dict[str, Any]] = []
    for p in pools:
        entries: list[dict[str, Any]] = []
        ahead_runs, ahead_devices, held = 0, 0, 0
        ahead_by_team: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for position, run in enumerate(by_pool.get(p.pk, []), start=1):
            mine = run.project.team_id in my_teams
            entry = _entry(run, position=position, mine=mine, predicted=predict_queued(predictor, run), now=now)
            if mine:
                entry["ahead"] = {
                    "runs": ahead_runs,
                    "devices": ahead_devices,
                    "by_team": [{"team": t, "runs": v[0], "devices": v[1]} for t, v in sorted(ahead_by_team.items())],
                    "held": held,
                }
            entries.append(entry)
            if run.reason_code in HELD:
                held += 1
                continue
            ahead_runs += 1
            ahead_devices += entry["devices"]
            ahead_by_team[entry["team"]][0] += 1
            ahead_by_team[entry["team"]][1] += entry["devices"]
        history = histories[p.pk]
        latest = history[-1] if history else None
        out.append({
            "pool": p.name,
            "kind": p.kind,
            "nodes_ready": ready.get(p.pk, 0),
            "queued_runs": len(entries),
            "queued_devices": sum(e["devices"] for e in entries),
            "queue": entries,
            "rules": _policy_rules(p),
            "accuracy": accuracy[p.pk],
            "utilization": latest,
            "utilization_history": history,
        })
    return out


def _policy_rules(pool: NodePool) -> list[str]:
    """The pool's rules in plain words, opening, where its stored policy has settings the
    scheduler ignores (stored before saving checked them, or written around the admin), with
    which ones, so nobody trusts them."""
    policy, problems = policy_read(pool.policy)
    ignored = [f"Some of pool {pool.name}'s policy settings are ignored and the defaults apply instead: "
               f"{'; '.join(problems)}. An administrator can correct them under Admin, Node pools."] if problems else []
    return ignored + explain_policy(policy)


def queue_fold(*, pools: list[dict[str, Any]], head: int | None, user: AnyUser) -> list[dict[str, Any]]:
    """queue_list's pools as the queue page shows them: a pool's first `head` runs, then only the
    runs the viewer submitted further back, at their true positions. `fold` says what the rest held
    (runs, devices, how many of them are the viewer's), or is None when nothing was left out.

    "Submitted", not queue_list's `mine` (whose details the viewer may see): an administrator may
    see every run, and a big team's, so that would keep the whole queue again."""
    username = user.get_username() if user.is_authenticated else None
    out: list[dict[str, Any]] = []
    for p in pools:
        queue = p["queue"]
        if head is None or len(queue) <= head:
            out.append({**p, "fold": None})
            continue
        beyond = queue[head:]
        mine = [e for e in beyond if e["run"] and username and e["run"]["submitted_by"] == username]
        fold = {"after": head, "runs": len(beyond), "devices": sum(e["devices"] for e in beyond), "mine": len(mine)}
        out.append({**p, "queue": queue[:head] + mine, "fold": fold})
    return out


def scheduler_status() -> dict[str, Any]:
    row = SchedulerState.objects.filter(pk=SchedulerState.SINGLETON).first()
    if row is None:
        return {"last_pass_at": None, "passes": 0, "last_duration_ms": None, "last_placed": 0, "stale": False}
    ago = (timezone.now() - row.pass_started_at).total_seconds() if row.pass_started_at else None
    return {"last_pass_at": row.pass_started_at, "passes": row.passes, "last_duration_ms": round(row.last_duration_ms, 1),
            "last_placed": row.last_placed, "last_pass_ago": "" if ago is None else f"{fmt_duration(max(0.0, ago))} ago",
            "stale": ago is not None and ago > STALE_PASS_S}
