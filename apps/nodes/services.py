"""Node lifecycle: join tokens, pools, claims, drain, and what the lost-node sweep reads (web
pulse, sweep grace). Registration, heartbeats and the sweep itself: apps.fleet.services."""

from __future__ import annotations

import logging
import secrets
import time
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from agents import protocol
from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.core.errors import Conflict, FieldError, Forbidden
from apps.core.queueing import request_scheduling_pass
from apps.jobtemplates.models import LaunchMode
from apps.nodes import wakeups
from apps.nodes.auth import hash_secret
from apps.nodes.models import JoinToken, Node, NodePool, NodeState, SweepWatch
from apps.runs.models import (
    Assignment,
    AssignmentState,
    Attempt,
    AttemptStatus,
    Checkpoint,
    Run,
)
from apps.runs.services.placement import master_port_for
from apps.vault.services import run_secret_values

log = logging.getLogger(__name__)

JOIN_TOKEN_PREFIX = "tyj_"
HEARTBEAT_INTERVAL_S = 5.0
# How often a waiting claim reads the database while Redis (its wake-ups) is unreachable.
CLAIM_FALLBACK_POLL_S = 3.0


def join_token_create(*, pool: NodePool, name: str = "", ttl_hours: float | None = 24) -> tuple[JoinToken, str]:
    """A new join token for the pool; the plaintext is returned once and only its hash is kept."""
    secret = JOIN_TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires = timezone.now() + timedelta(hours=ttl_hours) if ttl_hours else None
    token = JoinToken.objects.create(pool=pool, name=name, token_hash=hash_secret(secret), prefix=secret[:10], expires_at=expires)
    audit_record(action="node.join_token_created", target=token, after={"pool": pool.name, "name": name})
    return token, secret


def join_token_revoke(*, token: JoinToken) -> JoinToken:
    """Revoke a join token (agents that already joined keep their node credentials)."""
    if JoinToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
        audit_record(action="node.join_token_revoked", target=token, after={"pool": token.pool.name, "prefix": token.prefix})
    token.refresh_from_db()
    return token


POOL_FIELDS = ["name", "description", "kind", "price_per_device_hour", "carbon_g_per_kwh", "policy"]


def pool_save(*, pool: NodePool) -> NodePool:
    """Create or update a node pool from an unsaved/edited instance (the admin's form), audited."""
    before = None
    if pool.pk is not None:
        stored = NodePool.objects.get(pk=pool.pk)
        before = {f: str(getattr(stored, f)) for f in POOL_FIELDS}
    if pool.price_per_device_hour < 0 or pool.carbon_g_per_kwh < 0:
        raise FieldError("price_per_device_hour", "prices and carbon intensity must be >= 0")
    pool.full_clean()
    pool.save()
    audit_record(action="node_pool.updated" if before else "node_pool.created", target=pool, before=before,
                 after={f: str(getattr(pool, f)) for f in POOL_FIELDS})
    return pool


class _Gang(TypedDict):
    world_size: int
    nnodes: int
    local_world_size: int
    launch: protocol.LaunchName


def _gang(run: Run, a: Assignment) -> _Gang:
    """World size counts processes: one per device (the template's default) or one per node."""
    launch = run.template.launch if run.template_id else LaunchMode.PER_DEVICE
    local = 1 if launch == LaunchMode.PER_NODE else max(1, len(a.devices))
    return {"world_size": run.nodes * local, "nnodes": run.nodes, "local_world_size": local,
            "launch": "per_node" if launch == LaunchMode.PER_NODE else "per_device"}


def _spec(a: Assignment) -> protocol.AssignmentSpec:
    attempt, run = a.attempt, a.attempt.run
    resume = Checkpoint.objects.filter(run=run, deleted_at__isnull=True).exclude(stored_path="").order_by("-step", "-pk").first()
    return {
        "assignment_id": a.pk, "attempt_id": attempt.pk, "number": attempt.number, "run_id": run.pk, "node_rank": a.node_rank,
        **_gang(run, a), "devices": [int(d) for d in a.devices],
        "device_kind": a.node.devices.filter(index__in=a.devices).values_list("kind", flat=True).first() or "cpu",
        "entrypoint": run.entrypoint, "params": run.params, "checkpoint_policy": run.checkpoint_policy or {},
        "team": run.project.team.slug, "grace_period_s": run.grace_period_s, "max_runtime_s": run.max_runtime_s,
        "master_addr": attempt.master_addr, "master_port": attempt.master_port or master_port_for(run_id=run.pk, number=attempt.number),
        "resume_checkpoint": _ref(resume) if attempt.number > 1 else None,
        # Attempts whose late reports were refused: what they left on a node is not to be resumed from.
        "lost_attempts": sorted(Attempt.objects.filter(run=run, status=AttemptStatus.LOST).values_list("number", flat=True))
        if attempt.number > 1 else [],
        "init_checkpoint": _ref(run.init_checkpoint) if run.init_checkpoint_id else None,
        "code_snapshot": (
            {"sha256": run.code_snapshot.sha256, "size": run.code_snapshot.size} if run.code_snapshot is not None else None
        ),
        "image": _image(run),
    }


def _image(run: Run) -> protocol.ImageRef | None:
    image = run.template.image if run.template_id else None
    return {"name": image.name, "digest": image.digest} if image is not None else None


def _with_secrets(spec: protocol.AssignmentSpec, a: Assignment) -> protocol.AssignmentSpec:
    """The run's project secrets (apps.vault), decrypted for this node's claim only: never stored
    in the assignment, never logged."""
    values = run_secret_values(run=a.attempt.run)
    if values:
        spec["secrets"] = values
    return spec


def _with_limits(spec: protocol.AssignmentSpec, a: Assignment) -> protocol.AssignmentSpec:
    """The memory and CPU cores the run asked for this node's devices, for the agent's cgroup
    (absent when none was asked: the agent's own per-device default applies)."""
    run, share = a.attempt.run, max(1, len(a.devices or []))
    if run.memory_bytes_per_device:
        spec["memory_bytes"] = int(run.memory_bytes_per_device) * share
    if run.cpus_per_device:
        spec["cpus"] = float(run.cpus_per_device) * share
    return spec


def _ref(ckpt: Checkpoint | None) -> protocol.CheckpointRef | None:
    if ckpt is None:
        return None
    return {"id": ckpt.pk, "run_id": ckpt.run_id, "step": ckpt.step, "file": ckpt.file_name, "size": ckpt.size, "sha256": ckpt.sha256}


def node_claim(*, node: Node) -> list[protocol.AssignmentSpec]:
    """Claim this node's pending assignments (conditional update: each is claimed once)."""
    if node.state not in (NodeState.READY,):
        return []
    out: list[protocol.AssignmentSpec] = []
    pending = Assignment.objects.filter(node=node, state=AssignmentState.PENDING, attempt__status=AttemptStatus.STARTING)
    for a in pending.select_related("attempt__run__template__image", "node").order_by("pk"):
        if Assignment.objects.filter(pk=a.pk, state=AssignmentState.PENDING).update(state=AssignmentState.CLAIMED,
                                                                                    claimed_at=timezone.now()):
            with acting_as(label=f"agent:{node.hostname}"):
                audit_record(action="assignment.claimed", target=a.attempt, team_id=None, after={"node": node.hostname,
                                                                                                  "rank": a.node_rank})
            out.append(_with_secrets(_with_limits(_spec(a), a), a))
    return out


def node_claim_wait(*, node: Node, session: Any, wait_s: float) -> tuple[list[protocol.AssignmentSpec], Node]:
    """node_claim, waiting up to wait_s for work; also answers at once for a node no longer ready
    or a superseded session. Returns the claimed specs and the node as last read.

    The database is read before the wait and after each wake-up, never during it: the wait is a
    BLPOP on the node's wake-up list (apps.nodes.wakeups), pushed once placements, drains and
    registrations commit, and holds no database connection. A wait that times out answers without
    reading: the agent claims again at once, and that claim's first read finds work whose wake-up
    was lost. With Redis down the wait reads the database every CLAIM_FALLBACK_POLL_S instead.
    """
    deadline = time.monotonic() + wait_s
    if wait_s > 0:
        wakeups.claim_wakes_clear(node_id=node.pk)  # what they announced, the read below sees
    while True:
        if node.session != session:
            return [], node
        found = node_claim(node=node)
        left = deadline - time.monotonic()
        if found or node.state != NodeState.READY or left <= 0:
            return found, node
        if not connection.in_atomic_block:
            connection.close()  # an idle claim holds no database connection (one web thread each)
        woken = wakeups.claim_wait(node_id=node.pk, timeout=left)
        if woken is False:
            return [], node
        if woken is None:
            time.sleep(max(0.0, min(CLAIM_FALLBACK_POLL_S, deadline - time.monotonic())))
        node = Node.objects.get(pk=node.pk)


@transaction.atomic
def node_drain(*, node: Node, user: Any, deadline_s: int = 0) -> Node:
    if not getattr(user, "is_staff", False):
        raise Forbidden("only administrators may drain nodes")
    node = Node.objects.select_for_update().get(pk=node.pk)
    if node.state == NodeState.LOST:
        raise Conflict(f"node {node.hostname} is lost", code="node_lost")
    if node.state == NodeState.OFFLINE:
        # Draining an offline node would make it "lost" at the next sweep (a draining node is
        # expected to heartbeat), though its agent stopped cleanly.
        raise Conflict(f"node {node.hostname} is offline (its agent stopped); drain it once it is back", code="node_offline")
    before = node.state
    node.state = NodeState.DRAINING
    node.drained_by_admin = True
    node.drain_deadline = timezone.now() + timedelta(seconds=deadline_s) if deadline_s else None
    node.save(update_fields=["state", "drained_by_admin", "drain_deadline"])
    wakeups.claims_wake_on_commit(node_ids=[node.pk])  # its waiting claim answers "drain" at once
    audit_record(action="node.draining", target=node, actor=user, before={"state": before},
                 after={"state": node.state, "drain_deadline": node.drain_deadline.isoformat() if node.drain_deadline else None})
    return node


@transaction.atomic
def node_undrain(*, node: Node, user: Any) -> Node:
    if not getattr(user, "is_staff", False):
        raise Forbidden("only administrators may undrain nodes")
    node = Node.objects.select_for_update().get(pk=node.pk)
    if node.state != NodeState.DRAINING:
        raise Conflict(f"node {node.hostname} is {node.state}, not draining", code="not_draining")
    node.state = NodeState.READY
    node.drained_by_admin = False
    node.drain_deadline = None
    node.save(update_fields=["state", "drained_by_admin", "drain_deadline"])
    audit_record(action="node.ready", target=node, actor=user, before={"state": NodeState.DRAINING}, after={"state": node.state})
    request_scheduling_pass()
    return node


def web_pulse(*, now: datetime) -> None:
    """Record that a web process is up now (apps.nodes.pulse calls this every TRAINYARD_WEB_PULSE_S).

    A break of more than three pulses since the last one (from any web process) means the web
    tier was down: its up-stretch starts again from now. The conditional UPDATE never moves the
    pulse backwards, and writes nothing if another web process pulsed in the last half interval.
    """
    interval = settings.TRAINYARD_WEB_PULSE_S
    broken = Q(web_pulse_at__isnull=True) | Q(web_pulse_at__lt=now - timedelta(seconds=3 * interval)) | Q(web_up_since__isnull=True)
    due = Q(web_pulse_at__isnull=True) | Q(web_pulse_at__lt=now - timedelta(seconds=interval / 2))
    updated = (SweepWatch.objects.filter(due, pk=SweepWatch.SINGLETON)
               .update(web_up_since=Case(When(broken, then=Value(now)), default=F("web_up_since")), web_pulse_at=now))
    if not updated:
        SweepWatch.objects.get_or_create(pk=SweepWatch.SINGLETON, defaults={"web_up_since": now, "web_pulse_at": now})


def sweep_grace_until(*, now: datetime) -> SweepWatch:
    """Record this sweep; the watch row, with the end of the grace period silent nodes get, if any.

    Sweeps run every few seconds. A gap longer than max(TRAINYARD_SWEEP_GAP_S, half the node
    timeout) since the last one means the sweeper was down, and whatever stopped it (a worker,
    broker or database outage) most likely kept heartbeats from landing too: the silence says
    nothing about the nodes. Declaring them all lost would requeue every running job, so they
    get one node timeout from now to check in first.
    """
    timeout = settings.TRAINYARD_NODE_TIMEOUT_S
    gap = timedelta(seconds=max(settings.TRAINYARD_SWEEP_GAP_S, timeout / 2))
    with transaction.atomic():
        watch, _ = SweepWatch.objects.select_for_update().get_or_create(pk=SweepWatch.SINGLETON)
        if watch.last_sweep_at is not None and now - watch.last_sweep_at > gap:
            watch.grace_until = now + timedelta(seconds=timeout)
            log.warning("no node sweep for %s (more than %s): silent nodes get until %s before they are declared lost",
                        now - watch.last_sweep_at, gap, watch.grace_until.isoformat())
        watch.last_sweep_at = now
        watch.save(update_fields=["last_sweep_at", "grace_until"])
        return watch


def silent_before(*, watch: SweepWatch, now: datetime) -> datetime | None:
    """Nodes whose last heartbeat is older than this are lost; None: no node may be declared lost now.

    A node is lost when it stayed silent for a whole node timeout while the web tier was up to
    hear it: max(last heartbeat, web up since) + timeout <= the web tier's latest pulse. A web
    outage (or a sweeper outage, see sweep_grace_until) is not evidence against any node; after
    one, every node gets a full timeout from the web tier's return. Both times compared come from
    the web tier's clocks. No pulse ever recorded (no web process of this version has run): the
    silence alone counts, as before pulses existed.
    """
    timeout = timedelta(seconds=settings.TRAINYARD_NODE_TIMEOUT_S)
    if watch.grace_until is not None and now < watch.grace_until:
        return None
    if watch.web_pulse_at is None or watch.web_up_since is None:
        return now - timeout
    heard_until = min(now, watch.web_pulse_at)
    if heard_until - watch.web_up_since < timeout:
        return None
    return heard_until - timeout


