"""Node lifecycle: join tokens, pools, drain, what the lost-node sweep reads (web pulse, sweep
grace), and a node's own rows as its agent reports them (registration, heartbeats, device
health, lost). apps.fleet.services sequences these with the runs on the node."""

from __future__ import annotations

import logging
import math
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from agents import protocol
from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.core.errors import Conflict, FieldError, Forbidden
from apps.core.queueing import request_scheduling_pass
from apps.nodes import wakeups
from apps.nodes.auth import NODE_CREDENTIAL_PREFIX, hash_secret
from apps.nodes.models import Device, JoinToken, Node, NodePool, NodeState, SweepWatch

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


def _join_token_check(*, secret: str, pool_name: str) -> NodePool:
    token = JoinToken.objects.select_related("pool").filter(token_hash=hash_secret(secret)).first()
    now = timezone.now()
    if token is None or token.revoked_at is not None or (token.expires_at is not None and token.expires_at < now):
        raise Forbidden("join_token: unknown, revoked or expired", code="bad_join_token")
    if pool_name and token.pool.name != pool_name:
        if not NodePool.objects.filter(name=pool_name).exists():
            raise FieldError("pool", f"there is no node pool {pool_name!r}; the join token is for pool {token.pool.name!r}",
                             code="unknown_pool")
        raise FieldError("pool", f"the join token is for pool {token.pool.name!r}, not {pool_name!r}", code="wrong_pool")
    return token.pool


def _validate_register(data: dict[str, Any]) -> None:
    if int(data.get("protocol_version", 0)) > protocol.PROTOCOL_VERSION:
        raise FieldError("protocol_version", f"server speaks up to {protocol.PROTOCOL_VERSION}")
    uid = str(data.get("agent_uid", ""))
    if not uid or len(uid) > 64:
        raise FieldError("agent_uid", "required, at most 64 characters")
    if not str(data.get("hostname", "")) or len(str(data.get("hostname"))) > 253:
        raise FieldError("hostname", "required, at most 253 characters")
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices or len(devices) > 1024:
        raise FieldError("devices", "a list of 1 to 1024 devices")


def _sync_devices(node: Node, devices: list[dict[str, Any]]) -> None:
    seen = []
    for dev in devices:
        index = int(dev.get("index", 0))
        seen.append(index)
        Device.objects.update_or_create(node=node, index=index, defaults={
            "kind": "gpu" if dev.get("kind") == "gpu" else "cpu", "uuid": str(dev.get("uuid", ""))[:100],
            "model": str(dev.get("model", ""))[:200], "memory_bytes": int(dev.get("memory_bytes", 0))})
    node.devices.exclude(index__in=seen).delete()


def _heartbeat_state(current: str, data: dict[str, Any], *, drained_by_admin: bool = False) -> str:
    # Back from lost: to the drain an administrator left it in, if any, else ready for work.
    state: str = current
    if current == NodeState.LOST:
        state = NodeState.DRAINING if drained_by_admin else NodeState.READY
    if data.get("draining") and state == NodeState.READY:
        state = NodeState.DRAINING
    if data.get("offline"):
        state = NodeState.OFFLINE
    return state


def _number(value: Any) -> float | None:
    """A reported measurement, or None when it is not a finite number (never a 500 for it)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _devices_update(node_id: int, devices: list[Any]) -> None:
    """The reported utilization and power of every device: one UPDATE per device, in raw SQL
    (the heartbeat path; the ORM's query building cost more than the statement)."""
    rows = [(_number(dev.get("utilization")), _number(dev.get("power_w")), _bytes(dev.get("memory_used_bytes")), node_id,
             dev.get("index"))
            for dev in devices[:1024] if isinstance(dev, dict) and isinstance(dev.get("index"), int)]
    if not rows:
        return
    sql = (f"UPDATE {Device._meta.db_table} SET utilization = %s, power_w = %s, memory_used_bytes = %s "
           f"WHERE node_id = %s AND {connection.ops.quote_name('index')} = %s")
    with connection.cursor() as cursor:
        # One device (a CPU node's usual report) is a plain execute: executemany's batching
        # costs more than the one statement.
        if len(rows) == 1:
            cursor.execute(sql, rows[0])
        else:
            cursor.executemany(sql, rows)


def _bytes(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and 0 <= number < 2**63 else None


def _readings_clear(node_id: int) -> None:
    """Forget a node's device readings when it stops reporting (lost, offline): a reading shown
    for a node that measures nothing would pass for a current one. Health stays: a faulty GPU is
    faulty until its agent reports it healthy again."""
    Device.objects.filter(node_id=node_id).update(utilization=None, power_w=None, memory_used_bytes=None)


def _health_reported(devices: list[Any]) -> dict[int, tuple[bool, str]]:
    """index -> (healthy, reason) for the devices whose health the agent reported."""
    out: dict[int, tuple[bool, str]] = {}
    for dev in devices[:1024]:
        if isinstance(dev, dict) and isinstance(dev.get("index"), int) and isinstance(dev.get("healthy"), bool):
            reason = "" if dev["healthy"] else (str(dev.get("health_reason") or "") or "its agent reported a fault")
            out[dev["index"]] = (dev["healthy"], reason[:500])
    return out


def _health_news(previous: Any, devices: list[Any]) -> bool:
    """Whether a heartbeat needs the health path: a device is reported unhealthy (its runs may
    still need requeueing), or a device's health differs from the last heartbeat's. The usual
    heartbeat, all healthy as before, costs no query for it."""
    now = _health_reported(devices)
    if any(not healthy for healthy, _ in now.values()):
        return True
    before = _health_reported(previous.get("devices") or []) if isinstance(previous, dict) else {}
    return any(before.get(index) != health for index, health in now.items())


def _health_signature(devices: list[Any]) -> str:
    """The reported health of the devices in one string ("0:1,1:1"), kept in last_status["health"]
    so the snapshot heartbeat can fence on "no health news" in SQL."""
    return ",".join(f"{index}:{int(healthy)}" for index, (healthy, _) in sorted(_health_reported(devices).items()))


def _status(devices: list[Any], data: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {"devices": devices[:64], "running": (data.get("running") or [])[:256], "at": now.isoformat(),
            "health": _health_signature(devices)}


def _health_field_sql() -> str | None:
    """SQL for last_status["health"] as text, by database (None: no snapshot heartbeats there)."""
    if connection.vendor == "postgresql":
        return "last_status ->> 'health'"
    if connection.vendor == "sqlite":
        return "json_extract(last_status, '$.health')"
    return None


def node_heartbeat_quick(*, node: Node, data: dict[str, Any]) -> str | None:
    """The heartbeat of a node known only from a snapshot (apps.nodes.auth's credential cache):
    its state, or None when it cannot be recorded from the snapshot (the caller then looks the
    credential up afresh and takes node_heartbeat_record's path).

    Only the quiet heartbeat qualifies: the session and state the snapshot has, no state change
    asked, no device reported unhealthy. One UPDATE, fenced on the row still having the
    snapshot's credential, session and state and the same device health as reported now (so no
    health news: the health path is not needed), records it; then the devices' readings.
    """
    health_sql = _health_field_sql()
    devices = data.get("devices") or []
    if (health_sql is None or data.get("offline") or int(data.get("session", -1)) != node.session or not node.credential_hash
            or _heartbeat_state(node.state, data, drained_by_admin=node.drained_by_admin) != node.state
            or any(not healthy for healthy, _ in _health_reported(devices).values())):
        return None
    now = timezone.now()
    status = _status(devices, data, now)
    ops = connection.ops
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Node._meta.db_table} SET last_heartbeat_at = %s, last_status = %s "
            f"WHERE id = %s AND credential_hash = %s AND session = %s AND state = %s AND {health_sql} = %s",
            [ops.adapt_datetimefield_value(now), ops.adapt_json_value(status, None), node.pk, node.credential_hash, node.session,
             node.state, status["health"]])
        if not cursor.rowcount:
            return None
    _devices_update(node.pk, devices)
    return node.state


def _node_touch(node: Node, now: Any, status: dict[str, Any]) -> bool:
    """The quiet heartbeat's UPDATE, if the node is still in the state and session read."""
    ops = connection.ops
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Node._meta.db_table} SET last_heartbeat_at = %s, last_status = %s WHERE id = %s AND state = %s AND session = %s",
            [ops.adapt_datetimefield_value(now), ops.adapt_json_value(status, None), node.pk, node.state, node.session])
        return bool(cursor.rowcount)


@transaction.atomic
def node_register_record(*, data: dict[str, Any], node: Node | None) -> tuple[Node, str]:
    """An agent's (re-)registration: its node row (new session, ready or still drained by an
    administrator), its devices, and the audit. Returns the node and a new credential ("" when
    the stored one stays valid). What it ran before is apps.fleet's to reconcile."""
    _validate_register(data)
    uid = str(data["agent_uid"])
    credential = ""
    if node is None or node.agent_uid != uid:
        pool = _join_token_check(secret=str(data.get("join_token", "")), pool_name=str(data.get("pool", "")))
        node = Node.objects.select_for_update().filter(agent_uid=uid).first() or Node(agent_uid=uid, pool=pool)
        if node.pk is not None and node.pool_id != pool.pk:
            raise FieldError("pool", f"this agent is already registered in pool {node.pool.name!r}", code="registered_elsewhere")
        credential = NODE_CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
        node.credential_hash = hash_secret(credential)
    else:
        node = Node.objects.select_for_update().get(pk=node.pk)
    # A node joining for the first time had no state before: the audit says so rather than "ready".
    before = {"state": node.state, "session": node.session} if node.pk is not None else None
    node.hostname = str(data["hostname"])[:253]
    node.address = str(data.get("address", ""))[:253]
    node.cpus = max(0, int(data.get("cpus", 0)))
    node.memory_bytes = max(0, int(data.get("memory_bytes", 0)))
    node.agent_version = str(data.get("agent_version", ""))[:50]
    node.protocol_version = int(data.get("protocol_version", 1))
    node.session += 1
    # An agent restart ends its own drain; an administrator's drain stays until undrained.
    node.state = NodeState.DRAINING if node.drained_by_admin else NodeState.READY
    if not node.drained_by_admin:
        node.drain_deadline = None
    node.registered_at = node.last_heartbeat_at = timezone.now()
    node.save()
    wakeups.claims_wake_on_commit(node_ids=[node.pk])  # a claim of the old session answers 409 at once
    _sync_devices(node, data["devices"])
    with acting_as(label=f"agent:{node.hostname}"):
        audit_record(action="node.registered", target=node, before=before,
                     after={"state": node.state, "session": node.session, "pool": node.pool.name, "devices": len(data["devices"])})
    return node, credential


def node_heartbeat_record(*, node: Node, data: dict[str, Any]) -> str:
    """A heartbeat's news for the node row and its devices' readings; the node's state after it.

    The usual heartbeat changes no state: a conditional UPDATE of the node and one UPDATE of its
    devices, with no row lock. A state change (lost -> ready, draining, offline) or a race with
    one takes the locked, audited path.
    """
    if int(data.get("session", -1)) != node.session:
        raise Conflict(f"session {data.get('session')} was superseded by {node.session}; register again", code="stale_session")
    now = timezone.now()
    devices = data.get("devices") or []
    status = _status(devices, data, now)
    offline = bool(data.get("offline"))
    state: str = node.state
    quiet = _heartbeat_state(node.state, data, drained_by_admin=node.drained_by_admin) == node.state and not offline
    # The WHERE on state is the fence against a concurrent change (the sweep declaring the node
    # lost, an admin draining it): then nothing is updated here and the locked path redoes it.
    if not quiet or not _node_touch(node, now, status):
        with transaction.atomic():
            locked = Node.objects.select_for_update().get(pk=node.pk)
            before = locked.state
            state = locked.state = _heartbeat_state(before, data, drained_by_admin=locked.drained_by_admin)
            locked.last_heartbeat_at = now
            locked.last_status = status
            locked.save(update_fields=["state", "last_heartbeat_at", "last_status"])
            if locked.state == NodeState.OFFLINE:
                _readings_clear(locked.pk)  # an agent that stopped measures nothing
            else:
                _devices_update(locked.pk, devices)
            if locked.state != before:
                wakeups.claims_wake_on_commit(node_ids=[locked.pk])  # a draining agent's claim answers at once
                with acting_as(label=f"agent:{locked.hostname}"):
                    audit_record(action=f"node.{locked.state}", target=locked, before={"state": before}, after={"state": locked.state})
            if before == NodeState.LOST:
                request_scheduling_pass()
    else:
        _devices_update(node.pk, devices)
    return state


def devices_health_news(*, previous: Any, devices: list[Any]) -> bool:
    """Whether a heartbeat needs the health path (see _health_news)."""
    return _health_news(previous, devices)


def devices_health_update(*, node: Node, devices: list[Any]) -> dict[int, Device]:
    """Record the health the agent reported for the node's devices; a change is audited
    (device.unhealthy, device.healthy). Returns the unhealthy devices by index: the runs holding
    them are apps.fleet's to requeue."""
    reported = _health_reported(devices)
    if not reported:
        return {}
    sick: dict[int, Device] = {}
    recovered = False
    with transaction.atomic(), acting_as(label=f"agent:{node.hostname}"):
        for device in Device.objects.select_for_update().filter(node_id=node.pk, index__in=list(reported)).order_by("pk"):
            healthy, reason = reported[device.index]
            if not healthy:
                sick[device.index] = device
            if (device.healthy, device.health_reason) == (healthy, reason):
                continue
            flipped = device.healthy != healthy
            device.healthy, device.health_reason = healthy, reason
            if flipped:
                device.health_changed_at = timezone.now()
            device.save(update_fields=["healthy", "health_reason", "health_changed_at"])
            if flipped:
                recovered |= healthy
                audit_record(action="device.healthy" if healthy else "device.unhealthy", target=node,
                             before={"device": device.index, "healthy": not healthy},
                             after={"device": device.index, "uuid": device.uuid, "healthy": healthy, "reason": reason})
        if recovered:
            request_scheduling_pass()
    return sick


def node_lost_mark(*, node_id: int) -> Node | None:
    """Declare the node lost (locked, audited, its readings cleared); None if it already was.
    Call inside a transaction (the row lock). What the node held is requeued separately
    (`fleet.services.requeue_stranded`)."""
    node = Node.objects.select_for_update().get(pk=node_id)
    if node.state == NodeState.LOST:
        return None
    before = node.state
    node.state = NodeState.LOST
    node.save(update_fields=["state"])
    _readings_clear(node.pk)  # the last readings are not the node's now: nothing is reported
    audit_record(action="node.lost", target=node, before={"state": before}, after={"state": node.state})
    return node
