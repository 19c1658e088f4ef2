"""Node lifecycle: join tokens, pools, drain, and what the lost-node sweep reads (web pulse,
sweep grace). Registration, heartbeats, claims and the sweep itself: apps.fleet.services."""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import Conflict, FieldError, Forbidden
from apps.core.queueing import request_scheduling_pass
from apps.nodes import wakeups
from apps.nodes.auth import hash_secret
from apps.nodes.models import JoinToken, Node, NodePool, NodeState, SweepWatch

log = logging.getLogger(__name__)

JOIN_TOKEN_PREFIX = "tyj_"
HEARTBEAT_INTERVAL_S = 5.0


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


