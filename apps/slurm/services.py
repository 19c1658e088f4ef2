"""Runs on Slurm pools: submit queued runs with sbatch, follow their jobs, end them with scancel.

`slurm_sync` is the whole loop (the Celery beat runs it every TRAINYARD_SLURM_SYNC_S): each
queued run of a Slurm pool becomes one batch job; while Slurm keeps it pending the run stays
queued with Slurm's reason and expected start; when Slurm starts it, the run gets an attempt
(scheduled), and the batch job (agents.slurm_job) claims it, runs it and reports over the agent
protocol with a node credential made for that one run. Outcomes Slurm decides (time limit,
cancel, requeue, node failure) are reported here through the same lifecycle services an agent's
report goes through, so every state change is the transition table's and audited.
"""

from __future__ import annotations

import logging
import secrets
import shlex
import signal as signals
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.billing.models import PoolPrice
from apps.billing.services import pool_price_set
from apps.nodes.auth import NODE_CREDENTIAL_PREFIX, hash_secret
from apps.nodes.models import Node, NodePool, NodeState, PoolBackend
from apps.nodes.services import pool_save
from apps.nodes.wakeups import claims_wake_on_commit
from apps.runs.models import ATTEMPT_ENDED, Assignment, Attempt, LogChunk, Run, RunStatus, StopKind
from apps.runs.services import lifecycle
from apps.runs.services.placement import master_port_for
from apps.runs.services.transitions import run_transition
from apps.slurm import cli, conf
from apps.slurm.models import DeviceMode, SlurmJob, SlurmPool

log = logging.getLogger("apps.slurm")
ACTOR = "slurm"
REPO_ROOT = Path(__file__).resolve().parents[2]
LOG_TAIL_LINES = 20
REQUEUE_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})


@dataclass(frozen=True)
class SyncCounts:
    submitted: int = 0
    started: int = 0
    ended: int = 0


# --- the batch script ----------------------------------------------------------------------------

def account_for(*, cfg: SlurmPool, run: Run) -> str:
    key = f"{run.project.team.slug}/{run.project.slug}"
    accounts = cfg.accounts or {}
    return str(accounts.get(key) or accounts.get("*") or "")


def batch_script(*, cfg: SlurmPool, run: Run, node: Node, credential: str) -> str:
    """The sbatch script of a run: resources from the run, then one agents.slurm_job per node,
    which starts one process per device with the agent launcher's torchrun variables."""
    options = [f"--job-name=trainyard-run{run.pk}", f"--partition={cfg.partition}", f"--nodes={run.nodes}",
               "--ntasks-per-node=1", f"--time={cli.time_limit(run.max_runtime_s)}", "--requeue",
               # Nothing of the worker's environment (database URL, keys) goes to the job.
               "--export=NONE",
               f"--output={cfg.workdir}/slurm-%j.out", f"--chdir={cfg.workdir}"]
    if cfg.device_mode == DeviceMode.GPU:
        options.append(f"--gpus-per-node={run.devices_per_node}")
    else:
        options.append(f"--cpus-per-task={run.devices_per_node}")
    account = account_for(cfg=cfg, run=run)
    if account:
        options.append(f"--account={account}")
    qos = (cfg.qos or {}).get(run.priority)
    if qos:
        options.append(f"--qos={qos}")
    options += [str(o) for o in cfg.extra_sbatch or []]
    python = cfg.python or sys.executable
    repo = cfg.repo_root or str(REPO_ROOT)
    workdir = f"{cfg.workdir}/run{run.pk}-n{node.pk}"
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in options), "set -u",
             # srun passes on what this script exports (sbatch --export=NONE would make it pass nothing).
             "export SLURM_EXPORT_ENV=ALL", "export PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}",
             f"mkdir -p {shlex.quote(workdir)}",
             # Only the batch job and Slurm's administrators see these: the credential reports for this run only.
             f"export TRAINYARD_SLURM_SERVER={shlex.quote(cfg.server_url)}",
             f"export TRAINYARD_SLURM_CREDENTIAL={shlex.quote(credential)}",
             f"export TRAINYARD_SLURM_SESSION={node.session}",
             'export TRAINYARD_SLURM_MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             f"export PYTHONPATH={shlex.quote(repo)}:{shlex.quote(repo + '/sdk')}${{PYTHONPATH:+:$PYTHONPATH}}",
             f"cd {shlex.quote(repo)}",
             f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 {shlex.quote(python)} -m agents.slurm_job "
             f"--workdir {shlex.quote(workdir)}", ""]
    return "\n".join(lines)


def _credential_node(*, cfg: SlurmPool, run: Run) -> tuple[Node, str]:
    """A node row standing for the run's allocation, with a fresh credential that reports for
    this run only (the fence of the agent protocol: attempts assigned to this node)."""
    secret = NODE_CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    now = timezone.now()
    node = Node.objects.create(pool=cfg.pool, hostname=f"slurm-run{run.pk}", agent_uid=f"slurm-{uuid.uuid4().hex}",
                               state=NodeState.READY, credential_hash=hash_secret(secret), session=1, registered_at=now,
                               agent_version="slurm", protocol_version=_protocol_version())
    audit_record(action="node.registered", target=node, team_id=None, after={"state": node.state, "slurm_run": run.pk})
    return node, secret


def _protocol_version() -> int:
    from agents import protocol

    return int(protocol.PROTOCOL_VERSION)


# --- submitting ----------------------------------------------------------------------------------

def _prefix(cfg: SlurmPool) -> list[str]:
    return [str(w) for w in cfg.submit_command or []]


def slurm_job_submit(*, cfg: SlurmPool, run_id: int) -> SlurmJob | None:
    """sbatch one queued run (None if it is no longer queued or already has a live job)."""
    with transaction.atomic(), acting_as(label=ACTOR):
        run = Run.objects.select_for_update(of=("self",)).select_related("project__team").get(pk=run_id)
        if run.status != RunStatus.QUEUED or SlurmJob.objects.filter(run=run, finished_at__isnull=True).exists():
            return None
        if not cfg.submit_command:
            Path(cfg.workdir).mkdir(parents=True, exist_ok=True)  # here; a remote cluster's folder is its admins' to make
        node, credential = _credential_node(cfg=cfg, run=run)
        job = SlurmJob.objects.create(run=run, node=node)
        try:
            job.job_id = cli.sbatch(_prefix(cfg), batch_script(cfg=cfg, run=run, node=node, credential=credential))
        except cli.SlurmError as err:
            transaction.set_rollback(True)
            log.error("run %d: sbatch failed: %s", run.pk, err)
            Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
                reason_code="slurm_submit", status_reason=f"Slurm refused the job: {err}"[:1000])
            return None
        job.save(update_fields=["job_id"])
        node.hostname = f"slurm-job{job.job_id}"
        node.save(update_fields=["hostname"])
        Run.objects.filter(pk=run.pk).update(reason_code="slurm_pending", status_reason=f"submitted to Slurm as job {job.job_id}",
                                             updated_at=timezone.now())
        audit_record(action="slurm.submitted", target=run, team_id=run.project.team_id,
                     after={"job_id": job.job_id, "partition": cfg.partition})
    return job


def _queued_runs(cfg: SlurmPool) -> list[int]:
    now = timezone.now()
    live = SlurmJob.objects.filter(finished_at__isnull=True).values("run_id")
    return list(Run.objects.filter(pool=cfg.pool, status=RunStatus.QUEUED, devices_per_node__gt=0, nodes__gt=0)
                .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now)).exclude(pk__in=live)
                .order_by("pk").values_list("pk", flat=True))


# --- following -----------------------------------------------------------------------------------

def _pending(job: SlurmJob, info: cli.JobInfo) -> None:
    reason = info.reason if info.reason not in ("", "None", "(null)") else "waiting to be scheduled"
    Run.objects.filter(pk=job.run_id, status=RunStatus.QUEUED).update(
        reason_code="slurm_pending", status_reason=f"Slurm: {reason} (job {job.job_id})", estimated_start=info.start_time,
        estimated_start_low=None, estimated_start_high=None, updated_at=timezone.now())


def _attempt_start(job: SlurmJob) -> bool:
    """Slurm started the job: the run gets an attempt for the batch job to claim (queued -> scheduled)."""
    from apps.scheduling.services import estimate_errors_record

    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=job.run_id)
        if run.status != RunStatus.QUEUED:
            return False
        number = int(Attempt.objects.filter(run=run).aggregate(m=Max("number"))["m"] or 0) + 1
        attempt = Attempt.objects.create(run=run, number=number, master_addr="",
                                         master_port=master_port_for(run_id=run.pk, number=number))
        Assignment.objects.bulk_create([Assignment(attempt=attempt, node=job.node, node_rank=rank,
                                                   devices=list(range(run.devices_per_node))) for rank in range(run.nodes)])
        now = timezone.now()
        run_transition(run, to=RunStatus.SCHEDULED, action="run.scheduled", reason=f"running as Slurm job {job.job_id}",
                       queue_position=None, estimated_start=None)
        job.attempt = attempt
        job.save(update_fields=["attempt"])
        claims_wake_on_commit(node_ids=[job.node_id])
        estimate_errors_record(run_ids=[run.pk], started_at=now)
    return True


def _live_attempt(job: SlurmJob) -> Attempt | None:
    if job.attempt_id is None:
        return None
    attempt = Attempt.objects.get(pk=job.attempt_id)
    return None if attempt.status in ATTEMPT_ENDED else attempt


def _log_tail(attempt: Attempt) -> str:
    texts = list(LogChunk.objects.filter(attempt=attempt).exclude(stream="agent").order_by("-pk").values_list("text", flat=True)[:50])
    return "\n".join("".join(reversed(texts)).splitlines()[-LOG_TAIL_LINES:])


def _report_exit(job: SlurmJob, attempt: Attempt, info: cli.JobInfo | None) -> None:
    """The job ended without its own exit report (or Slurm decided the outcome): report it."""
    run = Run.objects.get(pk=job.run_id)
    state = info.state if info is not None else "GONE"
    exit_code = info.exit_code if info is not None else None
    common: dict[str, Any] = {"attempt_id": attempt.pk, "node_id": job.node_id, "node_rank": 0}
    if state == "TIMEOUT":
        limit = info.time_limit if info is not None else "?"
        lifecycle.assignment_exited(**common, exit_code=None, signal=signals.SIGTERM, stop_kind=lifecycle.MAX_RUNTIME,
                                    log_tail=_log_tail(attempt),
                                    reason=f"time limit: Slurm ended job {job.job_id} at its limit of {limit}")
    elif state == "CANCELLED" or run.cancel_requested_at is not None:
        if run.cancel_requested_at is None:  # scancel by someone outside Trainyard
            lifecycle.run_cancel(run=run, user=None)
        lifecycle.assignment_exited(**common, exit_code=exit_code, signal=signals.SIGTERM, stop_kind=StopKind.CANCEL)
    elif state in REQUEUE_STATES or state == "GONE":
        why = {"NODE_FAIL": "a node of the Slurm job failed", "GONE": f"Slurm no longer knows job {job.job_id}"}.get(
            state, f"Slurm {state.lower().replace('_', ' ')} job {job.job_id}")
        lifecycle.run_preempt(run=run, reason=why)
        lifecycle.assignment_exited(**common, exit_code=exit_code, signal=None, stop_kind=StopKind.PREEMPT)
    else:  # COMPLETED / FAILED / OUT_OF_MEMORY ... and the job's own report never came
        code = 0 if state == "COMPLETED" else (exit_code if exit_code else None)
        sig = info.signal if info is not None else None
        if state == "OUT_OF_MEMORY":
            code = lifecycle.OOM_EXIT_CODE
        lifecycle.assignment_exited(**common, exit_code=code if code is not None or sig else 1, signal=sig, stop_kind=None,
                                    log_tail=_log_tail(attempt))


def _requeued(job: SlurmJob, attempt: Attempt, restarts: int) -> None:
    """`scontrol requeue` (or Slurm's own requeue) restarts the same job: the attempt ends
    preempted and the run queues again; the job's next start is the run's next attempt, which
    resumes from the latest checkpoint."""
    run = Run.objects.get(pk=job.run_id)
    if not run.is_finished:
        lifecycle.run_preempt(run=run, reason=f"Slurm requeued job {job.job_id}")
        lifecycle.assignment_exited(attempt_id=attempt.pk, node_id=job.node_id, node_rank=0, exit_code=None,
                                    signal=signals.SIGTERM, stop_kind=StopKind.PREEMPT)
    # No attempt for this job until Slurm starts it again (the next start is the run's next attempt).
    SlurmJob.objects.filter(pk=job.pk).update(restarts=restarts, attempt=None)


def _finish(job: SlurmJob, info: cli.JobInfo | None) -> None:
    """Slurm is done with the job: its credential goes, its node row goes offline."""
    now = timezone.now()
    SlurmJob.objects.filter(pk=job.pk).update(finished_at=now, state=info.state if info else "GONE",
                                               exit_code=info.exit_code if info else None)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=job.node_id)
        before = node.state
        node.state, node.credential_hash = NodeState.OFFLINE, None
        node.save(update_fields=["state", "credential_hash"])
        audit_record(action="node.offline", target=node, before={"state": before}, after={"state": node.state,
                                                                                          "slurm_job": job.job_id})


def _follow(cfg: SlurmPool, job: SlurmJob, info: cli.JobInfo | None) -> str:
    """One job's news; returns "started", "ended" or ""."""
    run = Run.objects.get(pk=job.run_id)
    attempt = _live_attempt(job)
    if info is not None and not info.ended:
        if run.cancel_requested_at is not None or (run.is_finished and attempt is None and job.attempt_id is None):
            cli.scancel(_prefix(cfg), job.job_id)
            return ""
        SlurmJob.objects.filter(pk=job.pk).update(state=info.state, reason=info.reason[:200])
        # Slurm vouches for the allocation: its node row is not "silent" between a requeue and the
        # next start, when no batch job runs to heartbeat (the lost-node sweep would requeue it again).
        Node.objects.filter(pk=job.node_id, state=NodeState.READY).update(last_heartbeat_at=timezone.now())
        if attempt is not None and info.restarts > job.restarts:
            _requeued(job, attempt, info.restarts)
            return ""
        if info.state == "PENDING":
            _pending(job, info)
            return ""
        if info.state in ("RUNNING", "CONFIGURING", "COMPLETING") and attempt is None and run.status == RunStatus.QUEUED:
            if job.attempt_id is not None and info.restarts <= job.restarts:
                # This start of the job already ran an attempt, which Trainyard ended and requeued (an
                # infrastructure failure, a gang start that timed out): the job winds down, and the run
                # gets a new job. One that does not wind down within the grace is cancelled.
                ended = Attempt.objects.filter(pk=job.attempt_id).values_list("ended_at", flat=True).first()
                if ended is not None and timezone.now() - ended > timedelta(seconds=conf.report_grace_s()):
                    cli.scancel(_prefix(cfg), job.job_id)
                return ""
            return "started" if _attempt_start(job) else ""
        return ""
    # Ended, or forgotten by Slurm.
    if attempt is not None:
        waits_for_report = info is not None and info.state in ("COMPLETED", "FAILED", "OUT_OF_MEMORY") \
            and run.cancel_requested_at is None
        now = timezone.now()
        if waits_for_report and job.ended_seen_at is None:
            SlurmJob.objects.filter(pk=job.pk).update(ended_seen_at=now, state=info.state if info else "")
            return ""
        if waits_for_report and job.ended_seen_at and now - job.ended_seen_at < timedelta(seconds=conf.report_grace_s()):
            return ""
        _report_exit(job, attempt, info)
    elif not run.is_finished and run.status == RunStatus.QUEUED and info is not None and info.state in REQUEUE_STATES:
        pass  # ended before it started: the run is still queued and gets a new job next sync
    _finish(job, info)
    return "ended"


def _sync_lease(cfg: SlurmPool) -> bool:
    """One sync per pool at a time, whichever worker runs it (a lease, not a held lock)."""
    now = timezone.now()
    return bool(SlurmPool.objects.filter(Q(sync_lease_until__isnull=True) | Q(sync_lease_until__lt=now), pk=cfg.pk)
                .update(sync_lease_until=now + timedelta(seconds=120)))


def slurm_pool_sync(*, cfg: SlurmPool) -> SyncCounts:
    if not _sync_lease(cfg):
        return SyncCounts()
    submitted = started = ended = 0
    try:
        with acting_as(label=ACTOR):
            jobs = list(SlurmJob.objects.filter(run__pool=cfg.pool, finished_at__isnull=True).exclude(job_id="").order_by("pk"))
            infos = cli.show_jobs(_prefix(cfg), [j.job_id for j in jobs])
            for job in jobs:
                outcome = _follow(cfg, job, infos.get(job.job_id))
                started += outcome == "started"
                ended += outcome == "ended"
        for run_id in _queued_runs(cfg):
            submitted += slurm_job_submit(cfg=cfg, run_id=run_id) is not None
    finally:
        SlurmPool.objects.filter(pk=cfg.pk).update(sync_lease_until=None)
    return SyncCounts(submitted=submitted, started=started, ended=ended)


def slurm_sync() -> dict[str, int]:
    """Every Slurm pool: submit its queued runs, follow its jobs."""
    totals = {"submitted": 0, "started": 0, "ended": 0, "errors": 0}
    for cfg in SlurmPool.objects.select_related("pool").filter(pool__backend="slurm").order_by("pk"):
        try:
            counts = slurm_pool_sync(cfg=cfg)
        except cli.SlurmError as err:
            log.error("Slurm pool %s: %s", cfg.pool.name, err)
            totals["errors"] += 1
            continue
        totals["submitted"] += counts.submitted
        totals["started"] += counts.started
        totals["ended"] += counts.ended
    return totals


# --- configuration -------------------------------------------------------------------------------

def slurm_pool_save(*, pool_name: str, partition: str, server_url: str, workdir: str, submit_command: list[str],
                    device_mode: str, accounts: dict[str, str], qos: dict[str, str], python: str = "", repo_root: str = "",
                    price: Decimal | None = None) -> SlurmPool:
    """Make or update a Slurm-backed pool: the pool (nodes' pool_save), its dated price (billing),
    its Slurm settings; each audited."""
    with transaction.atomic():
        pool = NodePool.objects.filter(name=pool_name).first() or NodePool(name=pool_name)
        pool.backend = PoolBackend.SLURM
        pool = pool_save(pool=pool)
        if price is not None and price != pool.price_per_device_hour or not PoolPrice.objects.filter(pool=pool).exists():
            pool_price_set(pool=pool, price=price if price is not None else pool.price_per_device_hour)
        fields = {"partition": partition, "server_url": server_url.rstrip("/"), "workdir": workdir,
                  "submit_command": submit_command, "device_mode": device_mode, "accounts": accounts, "qos": qos,
                  "python": python, "repo_root": repo_root}
        cfg, created = SlurmPool.objects.update_or_create(pool=pool, defaults=fields)
        audit_record(action="slurm_pool.created" if created else "slurm_pool.updated", target=pool,
                     after={k: v for k, v in fields.items() if k != "accounts"} | {"accounts": sorted(accounts)})
    cfg.pool = NodePool.objects.get(pk=pool.pk)
    return cfg
