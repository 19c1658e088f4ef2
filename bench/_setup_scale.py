"""Executed by `manage.py shell -c` for bench/scale_pages.py, after `seed_demo --history`: a team
with real amounts of data. At BENCH_SCALE=1: 100 nodes of 8 GPUs (90 full with running runs),
5,000 runs over the two demo projects (succeeded, failed, cancelled, 300 queued, 90 running) with
attempts and assignments and a short loss/accuracy curve each, 3 runs of 200,000 metric points,
500 checkpoints (all but 5 removed by retention) and 2,000 log chunks on one run, 50,000 ledger
entries, 2,000 audit events; then one scheduling pass. Written with bulk_create, except metric
points, which go through tracking's own store (rollups and summaries as ingestion leaves them).
Prints JSON {"checkpoint_run": id, "compare": [10 run ids]} on its last line."""

import json
import math
import os
import random
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.billing.models import EntryKind, PoolPrice, UsageEntry
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Device, Node, NodePool, NodeState
from apps.runs.models import Assignment, AssignmentState, Attempt, AttemptStatus, Checkpoint, LogChunk, Run, RunStatus
from apps.scheduling.services import scheduling_pass
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store

rng = random.Random(42)
now = timezone.now()
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
N_RUNS = int(5000 * SCALE)
N_NODES = max(10, int(100 * SCALE))
N_LEDGER = int(50_000 * SCALE)
N_AUDIT = int(2000 * SCALE)
N_CKPT = max(6, int(500 * SCALE))
BIG_RUNS = 3  # each with 160,000 loss and 40,000 accuracy points (at scale 1)


@contextmanager
def no_auto_now(*fields):
    """Lets rows keep the past dates given them (auto_now_add would stamp them all now)."""
    saved = [(f, f.auto_now_add, f.auto_now) for f in fields]
    for f in fields:
        f.auto_now_add = False
        f.auto_now = False
    try:
        yield
    finally:
        for f, add, auto in saved:
            f.auto_now_add, f.auto_now = add, auto


alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
digits = Project.objects.get(slug="digits")
tinylm = Project.objects.get(slug="tiny-lm")
templates = {t.slug: t for t in JobTemplate.objects.filter(published=True)}

# --- nodes: one A100 pool of 100 nodes, 8 GPUs each ---------------------------------------------
with transaction.atomic():
    pool, _ = NodePool.objects.get_or_create(name="a100", defaults={"price_per_device_hour": Decimal("2.50"),
                                                                  "description": "scale test pool"})
    PoolPrice.objects.get_or_create(pool=pool, effective_from=now - timedelta(days=365),
                                    defaults={"price_per_device_hour": Decimal("2.50")})
    nodes = Node.objects.bulk_create([
        Node(pool=pool, hostname=f"a100-{i:03d}", agent_uid=f"scale-{i:03d}",
             state=NodeState.READY if i < N_NODES * 0.9 else rng.choice([NodeState.DRAINING, NodeState.LOST, NodeState.OFFLINE]),
             address=f"10.0.0.{i}", cpus=64, memory_bytes=512 << 30, agent_version="1.0", session=1,
             registered_at=now - timedelta(days=30), last_heartbeat_at=now - timedelta(seconds=rng.uniform(0, 20)),
             last_status={"load": rng.random()})
        for i in range(N_NODES)])
    Device.objects.bulk_create([
        Device(node=n, index=d, kind="gpu", uuid=f"GPU-{n.pk}-{d}", model="NVIDIA A100-SXM4-80GB", memory_bytes=80 << 30,
               utilization=rng.uniform(0, 100), power_w=rng.uniform(50, 400))
        for n in nodes for d in range(8)])

# --- runs, attempts, assignments ------------------------------------------------------------------
STATUSES = ([RunStatus.SUCCEEDED] * 70 + [RunStatus.FAILED] * 12 + [RunStatus.CANCELLED] * 8
            + [RunStatus.QUEUED] * 6 + [RunStatus.RUNNING] * 4)
runs = []
n_running = 0
for i in range(N_RUNS):
    project, owner, tmpl = (digits, alice, templates["digits-classifier"]) if i % 5 < 3 else (tinylm, bob, templates["ddp-train"])
    # Queued and running ones early in each hundred, so that small scales have some too.
    status = STATUSES[(i + 90) % len(STATUSES)] if i < N_RUNS - 10 else RunStatus.SUCCEEDED
    if status == RunStatus.RUNNING:
        # One full node per running run, 90 at most: the pool is full and the queue waits.
        status = RunStatus.RUNNING if n_running < int(N_NODES * 0.9) else RunStatus.SUCCEEDED
        n_running += status == RunStatus.RUNNING
    created = now - timedelta(days=60) + timedelta(seconds=i * (60 * 86400 / N_RUNS))
    started = created + timedelta(minutes=rng.uniform(1, 30))
    family = f"sweep-{i // 25}" if i % 3 == 0 else ""
    lr = rng.choice([0.3, 0.1, 0.03, 0.01, 0.003])
    devices = 8 if status == RunStatus.RUNNING else rng.choice([1, 2, 4, 8])
    run = Run(project=project, template=tmpl, submitted_by=owner, name=f"scale run {i} lr={lr}",
              params={"lr": lr, "epochs": rng.randint(1, 20), "batch_size": rng.choice([32, 64, 128])},
              tags={"owner": owner.username, "task": "digits" if project == digits else "lm", "family": family or "none",
                    "dataset": rng.choice(["a", "b", "c"])},
              family=family, pool=pool, nodes=1, devices_per_node=devices, entrypoint=tmpl.entrypoint,
              status=status, total_steps=1000, created_at=created, queued_at=created, updated_at=created)
    if status != RunStatus.QUEUED:
        run.started_at = started
        run.steps_done = 1000 if status == RunStatus.SUCCEEDED else rng.randint(0, 999)
        run.progress_at = started + timedelta(minutes=30)
    else:
        run.status_reason = "Behind earlier jobs"
        run.reason_code = ""
    if status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        run.finished_at = started + timedelta(hours=rng.uniform(0.2, 4))
        run.status_reason = {"succeeded": "finished", "failed": "rank 0 exited with code 1", "cancelled": "cancelled"}[status]
    runs.append(run)
with transaction.atomic(), no_auto_now(Run._meta.get_field("created_at"), Run._meta.get_field("updated_at")):
    runs = Run.objects.bulk_create(runs, batch_size=500)

attempts = []
for run in runs:
    if run.status == RunStatus.QUEUED:
        continue
    n_att = 2 if rng.random() < 0.15 else 1
    for a in range(1, n_att + 1):
        last = a == n_att
        if run.status == RunStatus.RUNNING and last:
            st, ended = AttemptStatus.RUNNING, None
        elif not last:
            st, ended = AttemptStatus.PREEMPTED, run.started_at + timedelta(minutes=10)
        else:
            st = {RunStatus.SUCCEEDED: AttemptStatus.SUCCEEDED, RunStatus.FAILED: AttemptStatus.FAILED}.get(
                run.status, AttemptStatus.CANCELLED)
            ended = run.finished_at
        attempts.append(Attempt(run=run, number=a, status=st, started_at=run.started_at, ended_at=ended,
                                created_at=run.started_at, exit_code=1 if st == AttemptStatus.FAILED else None,
                                energy_j=rng.uniform(1e5, 1e7), lineage={"seed": a}))
with transaction.atomic(), no_auto_now(Attempt._meta.get_field("created_at")):
    attempts = Attempt.objects.bulk_create(attempts, batch_size=500)
assignments = []
running_node = 0
for att in attempts:
    if att.status == AttemptStatus.RUNNING:
        node = nodes[running_node]
        running_node += 1
        state = AssignmentState.STARTED
        devs = list(range(8))
    else:
        node = nodes[rng.randrange(N_NODES)]
        state = AssignmentState.EXITED
        devs = [0]
    assignments.append(Assignment(attempt=att, node=node, node_rank=0, devices=devs, state=state, started_at=att.started_at,
                                  ended_at=att.ended_at, claimed_at=att.started_at))
with transaction.atomic():
    Assignment.objects.bulk_create(assignments, batch_size=500)

# --- small metric curves for every run that started (summaries for the runs list) ----------------
started_runs = [r for r in runs if r.status != RunStatus.QUEUED]
with transaction.atomic():
    for run in started_runs:
        lr = run.params["lr"]
        w0 = run.started_at.timestamp()
        rows = []
        for step in range(20):
            loss = 2.3 * math.exp(-step * lr) + rng.uniform(0, 0.1)
            rows.append(("loss", step * 50, loss, 0, w0 + step))
            if step % 5 == 4:
                rows.append(("val_accuracy", step * 50, min(0.99, 1 - loss / 2.5), 0, w0 + step))
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)

# --- a few runs with 200k points each -------------------------------------------------------------
big = [r for r in runs if r.status == RunStatus.SUCCEEDED and r.project_id == digits.pk][-BIG_RUNS:]
for run in big:
    w0 = run.started_at.timestamp()
    for lo in range(0, int(160_000 * SCALE) or 8000, 8000):
        rows = []
        for step in range(lo, lo + 8000):
            loss = 2.3 * math.exp(-step / 40000) + 0.05 * math.sin(step / 70) + rng.uniform(0, 0.02)
            rows.append(("loss", step, loss, 0, w0 + step * 0.01))
            if step % 4 == 0:
                rows.append(("val_accuracy", step, min(0.99, 1 - loss / 2.5), 0, w0 + step * 0.01))
        with transaction.atomic():
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)

# --- 500 checkpoints on one run (most deleted by retention), and logs ----------------------------
ck_run = big[-1]
ck_attempt = Attempt.objects.filter(run=ck_run).order_by("-number").first()
with transaction.atomic(), no_auto_now(Checkpoint._meta.get_field("created_at")):
    Checkpoint.objects.bulk_create([
        Checkpoint(run=ck_run, attempt=ck_attempt, step=(i + 1) * 300, file_name=f"ckpt-{(i + 1) * 300}.pt", size=350 << 20,
                   sha256=f"{i:064x}", metrics={"loss": 2.3 * math.exp(-i / 100)}, stored_path=f"ckpt/{ck_run.pk}/{i}.pt",
                   created_at=ck_run.started_at + timedelta(seconds=30 * i),
                   deleted_at=(ck_run.started_at + timedelta(seconds=30 * i + 600)) if i < N_CKPT - 5 else None)
        for i in range(N_CKPT)])
    LogChunk.objects.bulk_create([
        LogChunk(run=ck_run, attempt=ck_attempt, rank=0, seq=i, text="".join(f"step {i * 20 + j} loss 0.1234\n" for j in range(20)))
        for i in range(2000)])

# --- ledger: 50,000 entries over the attempts -----------------------------------------------------
entries = []
finished_attempts = [a for a in attempts if a.ended_at is not None]
per_attempt = math.ceil(N_LEDGER / len(finished_attempts))
run_by_id = {r.pk: r for r in runs}
price = Decimal("2.5000")
for att in finished_attempts:
    run = run_by_id[att.run_id]
    span = (att.ended_at - att.started_at) / per_attempt
    for j in range(per_attempt):
        if len(entries) >= N_LEDGER:
            break
        start = att.started_at + span * j
        last = j == per_attempt - 1
        secs = Decimal(span.total_seconds() * run.devices_per_node).quantize(Decimal("0.001"))
        entries.append(UsageEntry(
            attempt=att, run=run, project_id=run.project_id, team_id=digits.team_id if run.project_id == digits.pk else tinylm.team_id,
            pool=pool, template_id=run.template_id, kind=EntryKind.CLOSE if last else EntryKind.ACCRUAL,
            period_start=start, period_end=start + span, devices=run.devices_per_node,
            device_seconds=Decimal(0) if last else secs, price_per_device_hour=price,
            cost=Decimal(0) if last else (secs * price / 3600).quantize(Decimal("0.000001")),
            energy_kwh=Decimal("0.5"), co2_g=Decimal("200"), outcome=att.status if last else "", created_at=start + span))
with transaction.atomic(), no_auto_now(UsageEntry._meta.get_field("created_at")):
    UsageEntry.objects.bulk_create(entries, batch_size=1000)

# --- audit events ---------------------------------------------------------------------------------
events = []
actions = ["run.submit", "run.cancel", "run.state", "budget.update", "quota.update", "token.create"]
for i in range(N_AUDIT):
    run = runs[rng.randrange(len(runs))]
    user = alice if run.project_id == digits.pk else bob
    events.append(AuditEvent(at=now - timedelta(seconds=i * 1800), actor=user, actor_label=user.username,
                             action=rng.choice(actions), object_type="runs.run", object_id=str(run.pk),
                             object_repr=f"run {run.pk}", team_id=digits.team_id if run.project_id == digits.pk else tinylm.team_id,
                             before={"status": "queued"}, after={"status": run.status}, ip="10.1.2.3"))
with transaction.atomic(), no_auto_now(AuditEvent._meta.get_field("at")):
    AuditEvent.objects.bulk_create(events, batch_size=500)

# --- one scheduling pass, so queued runs carry estimates the way they do live ----------------------
scheduling_pass()
print(json.dumps({"checkpoint_run": ck_run.pk,
                  "compare": [r.pk for r in runs if r.project_id == digits.pk and r.status == RunStatus.SUCCEEDED][-10:]}))
