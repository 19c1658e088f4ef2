"""When would a run start if it were submitted now? (`sbatch --test-only`, for the submit page.)

The forecast adds the would-be run to a read-only snapshot of the cluster, fixes its virtual
deadline as its first pass would, runs the core once (does it start at once? if not, where in
line and why?) and replays the queue with the same estimator the passes use. Nothing is written
and no row is locked, so a user can ask as often as the form changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from apps.core.errors import ServiceError
from apps.core.text import fmt_duration
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.services.submission import Check, Submission, submission_admission_check, submission_validate
from apps.scheduling import core
from apps.scheduling.estimate import MAX_AHEAD, queue_estimates
from apps.scheduling.model import UNESTIMATED, QueuedJob, WaitCode
from apps.scheduling.outcomes import calibrations_cached
from apps.scheduling.pool_choice import probe_pool_choose
from apps.scheduling.pools import PoolChoice
from apps.scheduling.predict import RuntimeQuery
from apps.scheduling.selectors import reason_label
from apps.scheduling.services import ESTIMATE_MAX_PASSES, message_for
from apps.scheduling.snapshot import CLASS_OF, budget_blocks, dt, lags_load, params_key, snapshot_load, total_steps
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser

PROBE = "forecast"


@dataclass(frozen=True, slots=True)
class Forecast:
    pool: str
    starts_now: bool
    # Place in the pool's line (1 = next) and the waiting runs ahead of it; 0 when it starts now.
    position: int
    ahead: int
    reason_code: str
    reason: str
    message: str
    predicted_runtime_s: float
    runtime_basis: str
    start: datetime | None
    start_low: datetime | None
    start_high: datetime | None
    summary: str
    # The submission would be refused (budget, ...): the summary says why, in its own words.
    refused: bool = False
    # Of several acceptable pools, why `pool` (where it would finish first); "" for one pool.
    pool_reason: str = ""


def start_forecast(*, project: Project, template: JobTemplate, pool: NodePool, nodes: int, devices_per_node: int,
                   priority: str, preemptible: bool, max_runtime_s: int, params: dict[str, Any],
                   now: datetime | None = None, memory_bytes_per_device: int = 0, cpus_per_device: float = 0.0,
                   pools: Sequence[str] = ()) -> Forecast:
    now = now or timezone.now()
    snap = snapshot_load(now=now, lock=False)
    steps_param = template.total_steps_param or ""
    prediction = snap.predictor.predict(RuntimeQuery(
        team=project.team.slug, job_type=template.slug, devices=nodes * devices_per_node,
        params_key=params_key(params, steps_param),
        steps=total_steps(params, steps_param), template_max_runtime_s=float(max_runtime_s), pool=pool.name))
    block = budget_blocks([project], now).get(project.pk)
    probe = QueuedJob(
        id=PROBE, team=project.team.slug, pool=pool.name, priority_class=CLASS_OF.get(priority, core.PriorityClass.NORMAL),
        submitted_at=now.timestamp(), nodes=nodes, devices_per_node=devices_per_node,
        predicted_runtime=prediction.runtime_s, expected_runtime=prediction.expected_s, preemptible=preemptible,
        blocked_reason="budget" if block else None, blocked_message=block or "",
        memory_per_device=memory_bytes_per_device, cpus_per_device=cpus_per_device)
    state = replace(snap.state, queued=(*snap.state.queued, probe))
    # The deadlines the next pass would fix: the probe's, and those of runs still waiting for theirs.
    due = core.deadlines_due(state)
    state = replace(state, queued=tuple(replace(j, deadline=due[j.id]) if j.id in due else j for j in state.queued))
    # Of several acceptable pools, the one it would finish first in, as the next pass would choose.
    state, choice = probe_pool_choose(snap=snap, state=state, job_id=PROBE, pools=pools, template=template.slug)
    pool = snap.pools[choice.pool] if choice is not None else pool
    decision = core.schedule(state, explain=True)
    placed = {p.job_id for p in decision.placements}
    runtime_words = f"predicted to run {fmt_duration(prediction.runtime_s)}"
    if prediction.basis == "template maximum":
        runtime_words = f"runs for at most {fmt_duration(prediction.runtime_s)} (no similar run has finished yet to predict from)"
    if PROBE in placed:
        return _pool_said(choice, Forecast(pool=pool.name, predicted_runtime_s=prediction.runtime_s, runtime_basis=prediction.basis,
                        starts_now=True, position=0, ahead=0, reason_code=WaitCode.PLACED.value,
                        reason="Starts at once", message="Devices are free for it now.", start=now, start_low=now,
                        start_high=now, summary=f"Would start at once, on the next scheduling pass; {runtime_words}."))
    waiting = [e for e in decision.queue if e.pool == pool.name and e.job_id not in placed]
    position = next((i for i, e in enumerate(waiting, 1) if e.job_id == PROBE), len(waiting))
    entry = waiting[position - 1]
    teams = {job.id: job.team for job in state.queued} | {run.id: run.team for run in state.running}
    message = message_for(message=entry.message, team=project.team.slug, teams=teams)
    start, low, high = _probe_estimate(state, entry.code, now)
    when = _when_words(start, low, high, now)
    if entry.code == WaitCode.PREEMPTING:
        # Nobody is ahead of it: it waits only for the runs stopped for it to checkpoint and exit.
        summary = f"Would start once the runs stopped to make room for it have checkpointed and exited; {when}; {runtime_words}."
    elif entry.code in (WaitCode.NO_HARDWARE, WaitCode.NO_POLICY):
        # No place in line means anything while the pool cannot hold it: say what is missing.
        summary = (f"Would not start in pool {pool.name} as it stands: {message.rstrip('.')}; no start can be "
                   f"estimated until that changes; {runtime_words}.")
    else:
        summary = (f"Would wait: {position}{_ordinal(position)} in line in pool {pool.name}, "
                   f"{reason_label(entry.code.value).lower()}; {when}; {runtime_words}.")
    return _pool_said(choice, Forecast(pool=pool.name, predicted_runtime_s=prediction.runtime_s, runtime_basis=prediction.basis,
                      starts_now=False, position=position, ahead=position - 1, reason_code=entry.code.value,
                      reason=reason_label(entry.code.value), message=message, start=start,
                      start_low=low, start_high=high, summary=summary))


def _pool_said(choice: PoolChoice | None, forecast: Forecast) -> Forecast:
    if choice is None:
        return forecast
    reason = choice.reason[0].upper() + choice.reason[1:]
    return replace(forecast, pool_reason=choice.reason, summary=f"{forecast.summary} {reason}.")


def _probe_estimate(
    state: core.ClusterState, code: WaitCode, now: datetime
) -> tuple[datetime | None, datetime | None, datetime | None]:
    """The probe's estimated start, low and high; none while it waits for budget or hardware."""
    estimate = None
    if code not in UNESTIMATED:
        lags = lags_load(now=now, policies=dict(state.policies))
        # The same learned correction the passes apply, so the forecast is what a pass would say.
        calibration = calibrations_cached(now=now, pools=state.policies)
        estimate = queue_estimates(state, jobs=[PROBE], lags=lags, max_passes=ESTIMATE_MAX_PASSES,
                                   max_ahead=MAX_AHEAD, calibration=calibration).get(PROBE)
    if not estimate:
        return None, None, None
    return dt(estimate.start), dt(estimate.low), dt(estimate.high)


def _when_words(start: datetime | None, low: datetime | None, high: datetime | None, now: datetime) -> str:
    if start is None:
        return "no start can be estimated while it waits for this"
    when = f"estimated start in {fmt_duration((start - now).total_seconds())}"
    if low is not None and high is not None:
        when += f" (between {fmt_duration((low - now).total_seconds())} and {fmt_duration((high - now).total_seconds())})"
    return when


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def forecast_for_submission(*, user: AnyUser, submission: Submission) -> Forecast:
    """The forecast for what `run_submit` would queue, checked the same way: ServiceError (400)
    naming every bad field, Forbidden below engineer. Sweeps queue one run per point; forecast a point.

    A submission with tags is a dry run, checked as the submission would be (but for the code
    snapshot, not uploaded yet), so it refuses what the submission would; without tags (the
    submit page, asking as the form changes) only what decides the place in line is checked."""
    check = Check.PLACE if submission.tags is None else Check.DRY_RUN
    valid = submission_validate(submission=submission, user=user, check=check)
    refusal = None
    if check is Check.PLACE:
        # The submission's own admission checks (budget, ...), so the form never says "would wait"
        # for what the submission refuses; a dry run ran them already, and refuses with a 400.
        try:
            submission_admission_check(valid=valid, user=user)
        except ServiceError as err:
            if err.fields:
                raise
            refusal = err
    resources = valid.resources
    forecast = start_forecast(project=valid.project, template=valid.template, pool=resources.pool, nodes=resources.nodes,
                              devices_per_node=resources.devices_per_node, priority=valid.priority,
                              preemptible=resources.preemptible, max_runtime_s=resources.max_runtime_s,
                              params=valid.params, memory_bytes_per_device=resources.memory_bytes_per_device,
                              cpus_per_device=resources.cpus_per_device, pools=resources.pools)
    return forecast if refusal is None else _refused(forecast, refusal)


def _refused(forecast: Forecast, err: ServiceError) -> Forecast:
    """The forecast of a submission its admission checks refuse: no place in line and no start."""
    budget = err.code == "budget_exceeded"
    return replace(forecast, starts_now=False, position=0, ahead=0, refused=True,
                   reason_code=WaitCode.BUDGET.value if budget else "refused",
                   reason="Would be refused: over budget" if budget else "Would be refused",
                   message=err.message, start=None, start_low=None, start_high=None,
                   summary=f"Would be refused: {err.message}")
