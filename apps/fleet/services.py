"""An agent's session with the server, where a node and the runs on it meet: registration (join
token or stored credential), heartbeats (device readings and health, stop and kill orders),
claims (the assignments a node starts, with their secrets) and the sweep that declares silent
nodes lost and requeues their runs.

A node's own rows (state, session, devices, readings, health) are written by apps.nodes'
services; attempts, assignments and runs by apps.runs' (lifecycle, assignments). This layer
only sequences them, and sits above both, so apps.nodes never imports apps.runs.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from datetime import timedelta
from typing import Any, NamedTuple, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents import protocol
from apps.audit.context import acting_as
from apps.core.queueing import request_scheduling_pass
from apps.jobtemplates.models import LaunchMode
from apps.nodes import wakeups
from apps.nodes.auth import node_by_credential
from apps.nodes.models import Device, Node, NodeState
from apps.nodes.services import (
    devices_health_news,
    devices_health_update,
    node_heartbeat_quick,
    node_heartbeat_record,
    node_lost_mark,
    node_register_record,
    silent_before,
    sweep_grace_until,
)
from apps.runs.models import (
    ASSIGNMENT_HOLDS_DEVICES,
    ATTEMPT_ENDED,
    Assignment,
    AssignmentState,
    Attempt,
    AttemptStatus,
    Checkpoint,
    Run,
)
from apps.runs.services import lifecycle
from apps.runs.services.assignments import assignment_claim
from apps.runs.services.placement import master_port_for
from apps.vault.services import run_secret_values

log = logging.getLogger(__name__)

# How often a waiting claim reads the database while Redis (its wake-ups) is unreachable.
CLAIM_FALLBACK_POLL_S = 3.0
# An idle long claim ends at a random point of the last CLAIM_SPREAD of its wait: agents that
# started together (a fleet rollout, the server back after an outage) would otherwise all claim
# again in the same few seconds, every wait_s, for ever, and each such wave queues heartbeats
# behind it (bench/load.py --idle-agents: 1,000 claims in 5 s every 25 s). Short waits (tests,
# an agent that asks for a few seconds) are kept as asked.
CLAIM_SPREAD = 0.4
CLAIM_SPREAD_FROM_S = 10.0


def claim_wait_spread(wait_s: float) -> float:
    """How long an idle claim that asked for wait_s seconds is held (never longer than asked)."""
    if wait_s < CLAIM_SPREAD_FROM_S:
        return wait_s
    return wait_s * (1.0 - CLAIM_SPREAD * random.random())


@transaction.atomic
def node_register(*, data: dict[str, Any], node: Node | None) -> tuple[Node, str, list[int]]:
    """Register (join token) or re-register (stored credential) an agent; bumps the session.

    Returns the node, a new credential ("" when the stored one stays valid) and the attempts
    the agent reported running that it must kill. Assignments the server thinks run on this node
    but the agent does not report died with the previous agent process: they are lost.
    """
    node, credential = node_register_record(data=data, node=node)
    with acting_as(label=f"agent:{node.hostname}"):
        kill = _reconcile(node, data.get("running") or [])
    devices_health_record(node=node, devices=data["devices"])
    request_scheduling_pass()
    return node, credential, kill


def _valid_running(node: Node, running: list[Any]) -> tuple[set[int], list[int]]:
    """(attempt ids the node may keep running, attempt ids it must kill)."""
    keep: set[int] = set()
    kill: list[int] = []
    for item in running:
        attempt_id = int(item.get("attempt_id", 0)) if isinstance(item, dict) else 0
        assignment = Assignment.objects.select_related("attempt").filter(attempt_id=attempt_id, node=node).first()
        if assignment is None or assignment.attempt.status in ATTEMPT_ENDED or assignment.state not in ASSIGNMENT_HOLDS_DEVICES:
            kill.append(attempt_id)
            continue
        latest = Attempt.objects.filter(run_id=assignment.attempt.run_id).order_by("-number").values_list("pk", flat=True).first()
        if latest != attempt_id:
            kill.append(attempt_id)
        else:
            keep.add(attempt_id)
    return keep, kill


def _reconcile(node: Node, running: list[Any]) -> list[int]:
    keep, kill = _valid_running(node, running)
    gone = Assignment.objects.filter(node=node, state__in=[AssignmentState.CLAIMED, AssignmentState.STARTED]).exclude(
        attempt_id__in=keep).values_list("attempt_id", flat=True)
    for attempt_id in set(gone):
        lifecycle.attempt_lost(attempt_id=attempt_id, reason=f"node {node.hostname} restarted; its job did not survive")
    return kill


def devices_health_record(*, node: Node, devices: list[Any]) -> None:
    """Record the health the agent reported for the node's devices (apps.nodes), and lose every
    attempt holding an unhealthy device, its run requeued (an infrastructure failure: it resumes
    from its checkpoint elsewhere)."""
    sick = devices_health_update(node=node, devices=devices)
    if sick:
        _requeue_holders(node, sick)


def _requeue_holders(node: Node, sick: dict[int, Device]) -> None:
    held = Assignment.objects.filter(node_id=node.pk, state__in=ASSIGNMENT_HOLDS_DEVICES).values_list("attempt_id", "devices")
    for attempt_id, devices in sorted(held):
        bad = sorted(int(d) for d in devices or [] if int(d) in sick)
        if not bad:
            continue
        device = sick[bad[0]]
        name = f"GPU {device.index}" if device.kind == "gpu" else f"device {device.index}"
        reason = f"{name} ({device.uuid or 'no UUID'}) on {node.hostname} is unhealthy: {device.health_reason}"
        with acting_as(label=f"agent:{node.hostname}"):
            lifecycle.attempt_lost(attempt_id=attempt_id, reason=reason, reason_code="device_unhealthy", suspect_node=node.pk)


def node_heartbeat(*, node: Node, data: dict[str, Any]) -> protocol.HeartbeatResponse:
    """Record a heartbeat (apps.nodes); answer with the stop orders and kills for what the agent runs.

    Heartbeats are most of the agent traffic (every node, every 5 s): the usual one is a
    conditional UPDATE of the node, one UPDATE of its devices (node_heartbeat_record) and one
    SELECT of its assignments (_heartbeat_orders), with no row lock.
    """
    devices = data.get("devices") or []
    offline = bool(data.get("offline"))
    state = node_heartbeat_record(node=node, data=data)
    if not offline and devices_health_news(previous=node.last_status, devices=devices):
        devices_health_record(node=node, devices=devices)
    if offline:
        # A drained agent leaves nothing behind; whatever it still held cannot run anymore.
        for attempt_id in sorted(set(Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES)
                                     .values_list("attempt_id", flat=True))):
            with acting_as(label=f"agent:{node.hostname}"):
                lifecycle.attempt_lost(attempt_id=attempt_id, reason=f"the agent on {node.hostname} stopped")
        return {"stop": [], "kill": [], "drain": False}
    kill, stop = _heartbeat_orders(node, data.get("running") or [])
    # Ended attempts (aborted, lost) whose processes an agent may still hold are killed outright.
    return {"stop": stop, "kill": kill, "drain": state == NodeState.DRAINING}


def node_heartbeat_from_snapshot(*, node: Node, data: dict[str, Any]) -> protocol.HeartbeatResponse | None:
    """node_heartbeat for a node known from the credential cache's snapshot: the quiet heartbeat
    in one fenced UPDATE of the node (node_heartbeat_quick), its devices' readings and the orders;
    None when the snapshot would not do (the caller redoes it with the node read afresh)."""
    state = node_heartbeat_quick(node=node, data=data)
    if state is None:
        return None
    kill, stop = _heartbeat_orders(node, data.get("running") or [])
    return {"stop": stop, "kill": kill, "drain": state == NodeState.DRAINING}


# What the heartbeat answers with, for the node's assignments that hold devices or that the
# agent reports running: one `_OrderRow` each. Raw SQL: heartbeats are most of the agent traffic.
_ORDERS_SQL = (
    "SELECT a.attempt_id, a.state, t.status, t.stop_kind, r.grace_period_s, "
    "(SELECT l.id FROM {attempt} l WHERE l.run_id = t.run_id ORDER BY l.number DESC LIMIT 1) "
    "FROM {assignment} a JOIN {attempt} t ON t.id = a.attempt_id JOIN {run} r ON r.id = t.run_id "
    "WHERE a.node_id = %s AND (a.state IN ({holds}){reported}) ORDER BY a.attempt_id, a.node_rank"
)


class _OrderRow(NamedTuple):
    """A row of `_ORDERS_SQL`, in its column order."""

    attempt_id: int
    state: str  # the assignment's
    status: str  # the attempt's
    stop_kind: str
    grace_period_s: int
    latest_attempt_id: int  # the run's latest attempt


def _heartbeat_orders(node: Node, running: list[Any]) -> tuple[list[int], list[protocol.StopOrder]]:
    """(attempts to kill, stop orders) in one query: what _valid_running decides for the reported
    attempts, and a stop order for each assignment on the node whose attempt was asked to stop."""
    ids = [item.get("attempt_id") if isinstance(item, dict) else 0 for item in running]
    reported = [i if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**63 else 0 for i in ids]
    holds = sorted(ASSIGNMENT_HOLDS_DEVICES)
    sql = _ORDERS_SQL.format(attempt=Attempt._meta.db_table, assignment=Assignment._meta.db_table, run=Run._meta.db_table,
                             holds=", ".join(["%s"] * len(holds)),
                             reported=f" OR a.attempt_id IN ({', '.join(['%s'] * len(reported))})" if reported else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, [node.pk, *holds, *reported])
        rows = [_OrderRow._make(row) for row in cursor.fetchall()]
    first: dict[int, _OrderRow] = {}
    stop: list[protocol.StopOrder] = []
    for row in rows:
        first.setdefault(row.attempt_id, row)
        if row.state in ASSIGNMENT_HOLDS_DEVICES and row.stop_kind:
            stop.append({"attempt_id": row.attempt_id, "kind": row.stop_kind,  # type: ignore[typeddict-item]
                         "grace_period_s": row.grace_period_s})
    kill = []
    for attempt_id in reported:
        found = first.get(attempt_id)
        if (found is None or found.status in ATTEMPT_ENDED or found.state not in ASSIGNMENT_HOLDS_DEVICES
                or found.latest_attempt_id != attempt_id):
            kill.append(attempt_id)
    return kill, stop


def node_mark_lost(*, node_id: int) -> bool:
    """Declare the node lost; its attempts are requeued by `requeue_stranded`."""
    with transaction.atomic():
        return node_lost_mark(node_id=node_id) is not None


def requeue_stranded() -> None:
    """Requeue every attempt still holding devices on a lost node: those of nodes just declared
    lost, and any that a sweep which died between the two steps left there."""
    held = Assignment.objects.filter(node__state=NodeState.LOST, state__in=ASSIGNMENT_HOLDS_DEVICES).exclude(
        attempt__status__in=ATTEMPT_ENDED)
    stranded = sorted(set(held.values_list("attempt_id", "node__hostname")))
    for attempt_id, hostname in stranded:
        lifecycle.attempt_lost(attempt_id=attempt_id, reason=f"node {hostname} lost (silent past {settings.TRAINYARD_NODE_TIMEOUT_S}s)")


def nodes_sweep() -> dict[str, int]:
    """Declare silent nodes lost, abort gangs that did not fully start, preempt past drain deadlines."""
    now = timezone.now()
    counts = {"lost": 0, "aborted": 0, "drained": 0, "grace": 0}
    watch = sweep_grace_until(now=now)
    with acting_as(label="system"):
        live = [NodeState.READY, NodeState.DRAINING]
        quiet = Node.objects.filter(state__in=live, last_heartbeat_at__lt=now - timedelta(seconds=settings.TRAINYARD_NODE_TIMEOUT_S))
        cutoff = silent_before(watch=watch, now=now)
        lost = [] if cutoff is None else list(quiet.filter(last_heartbeat_at__lt=cutoff).values_list("pk", flat=True))
        counts["grace"] = quiet.count() - len(lost)
        if counts["grace"] and (watch.grace_until is None or now >= watch.grace_until):
            log.warning("%d silent node(s) are not declared lost: the web tier was up to hear them only from %s to %s "
                        "(less than the node timeout of %ss since their last heartbeat)", counts["grace"],
                        watch.web_up_since and watch.web_up_since.isoformat(), watch.web_pulse_at and watch.web_pulse_at.isoformat(),
                        settings.TRAINYARD_NODE_TIMEOUT_S)
        for node_id in lost:
            counts["lost"] += int(node_mark_lost(node_id=node_id))
        requeue_stranded()
        late = now - timedelta(seconds=settings.TRAINYARD_GANG_START_TIMEOUT_S)
        for attempt_id in Attempt.objects.filter(status=AttemptStatus.STARTING, created_at__lt=late).values_list("pk", flat=True):
            why = f"not every rank started within {settings.TRAINYARD_GANG_START_TIMEOUT_S}s"
            lifecycle.attempt_abort(attempt_id=attempt_id, reason=why)
            counts["aborted"] += 1
        for node in Node.objects.filter(state=NodeState.DRAINING, drain_deadline__lt=now):
            for a in Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES, attempt__stop_kind="").select_related(
                    "attempt__run"):
                lifecycle.attempt_request_stop(attempt_id=a.attempt_id, kind="drain")
                counts["drained"] += 1
    return counts


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


def _pending_sql() -> str:
    """A statement true when the node (parameter) has an assignment to claim (parameters: the
    pending state, the starting status). The FROM ... INNER JOIN spelling is the ORM's:
    bench/load.py counts claim statements by it."""
    q = connection.ops.quote_name
    a, t = q(Assignment._meta.db_table), q(Attempt._meta.db_table)
    return (f"SELECT 1 FROM {a} INNER JOIN {t} ON ({a}.{q('attempt_id')} = {t}.{q('id')}) "
            f"WHERE {a}.{q('node_id')} = %s AND {a}.{q('state')} = %s AND {t}.{q('status')} = %s")


def _pending_exists(node_id: int) -> bool:
    """Whether the node has an assignment to claim: one plain statement. Most claims find none
    (an idle agent claims again each time its wait ends), and the ORM's query for the specs,
    five tables joined, cost more CPU to build than the database took to answer it."""
    with connection.cursor() as cursor:
        cursor.execute(_pending_sql() + " LIMIT 1", [node_id, AssignmentState.PENDING, AttemptStatus.STARTING])
        return cursor.fetchone() is not None


class _ClaimCheck(NamedTuple):
    """The node's row as a claim needs it, read with the credential check and the pending check."""

    state: str
    session: int
    pending: bool


def _claim_check(node_id: int, credential_hash: str) -> _ClaimCheck | None:
    """One statement: the node's state and session, and whether work is pending, if the node still
    holds this credential (None: revoked or gone)."""
    table = connection.ops.quote_name(Node._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT state, session, EXISTS ({_pending_sql()}) FROM {table} WHERE id = %s AND credential_hash = %s",
                       [node_id, AssignmentState.PENDING, AttemptStatus.STARTING, node_id, credential_hash])
        row = cursor.fetchone()
    return None if row is None else _ClaimCheck(str(row[0]), int(row[1]), bool(row[2]))


def node_claim_wait_from_snapshot(*, node: Node, session: Any,
                                  wait_s: float) -> tuple[list[protocol.AssignmentSpec], Node] | None:
    """node_claim_wait for a node known from the credential cache's snapshot (apps.nodes.auth):
    its credential, state, session and pending work are read in one statement, so the usual
    claim (nothing pending: it goes on to wait on Redis) costs that statement alone. None: the
    credential is no longer the node's (the caller looks it up afresh and refuses it)."""
    if not node.credential_hash:
        return None
    if wait_s > 0:
        wakeups.claim_wakes_clear(node_id=node.pk)  # before the read, as node_claim_wait does
    check = _claim_check(node.pk, node.credential_hash)
    if check is None:
        return None
    if check.session != node.session:
        # A new registration (hostname, address may have changed too): the whole row afresh.
        reread = node_by_credential(node.credential_hash)
        if reread is None:
            return None
        fresh = reread
    else:
        fresh = copy.copy(node)  # the cached snapshot itself stays as it was read
    fresh.state, fresh.session = check.state, check.session
    return node_claim_wait(node=fresh, session=session, wait_s=wait_s, read=check.pending)


def claim_wait_s(data: dict[str, Any]) -> float | None:
    """A claim's `wait_s` (default 10 s), or None when it is not a number from 0 to MAX_CLAIM_WAIT_S."""
    wait = data.get("wait_s", 10)
    if not isinstance(wait, int | float) or not 0 <= wait <= protocol.MAX_CLAIM_WAIT_S:
        return None
    return float(wait)


def claim_answer(*, found: list[protocol.AssignmentSpec], node: Node, session: Any) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of a claim that found `found` on `node` as last read: a 409 for a
    superseded session, else the assignments and whether the node should drain."""
    if node.session != session:
        return 409, {"assignments": [], "stale_session": True}
    return 200, {"assignments": found, "drain": node.state != NodeState.READY}


def node_claim(*, node: Node) -> list[protocol.AssignmentSpec]:
    """Claim this node's pending assignments (conditional update: each is claimed once)."""
    if node.state not in (NodeState.READY,):
        return []
    if not _pending_exists(node.pk):
        return []
    out: list[protocol.AssignmentSpec] = []
    pending = Assignment.objects.filter(node=node, state=AssignmentState.PENDING, attempt__status=AttemptStatus.STARTING)
    for a in pending.select_related("attempt__run__template__image", "node").order_by("pk"):
        if assignment_claim(assignment=a, hostname=node.hostname):
            out.append(_with_secrets(_with_limits(_spec(a), a), a))
    return out


def node_claim_wait(*, node: Node, session: Any, wait_s: float,
                    read: bool | None = None) -> tuple[list[protocol.AssignmentSpec], Node]:
    """node_claim, waiting up to wait_s for work; also answers at once for a node no longer ready
    or a superseded session. Returns the claimed specs and the node as last read.

    The database is read before the wait and after each wake-up, never during it: the wait is a
    BLPOP on the node's wake-up list (apps.nodes.wakeups), pushed once placements, drains and
    registrations commit, and holds no database connection. A wait that times out answers without
    reading: the agent claims again at once, and that claim's first read finds work whose wake-up
    was lost. With Redis down the wait reads the database every CLAIM_FALLBACK_POLL_S instead.

    `read` (node_claim_wait_from_snapshot): the node was just read, its wake-ups cleared first, and
    work found pending (True) or not (False: the first claim attempt is skipped).
    """
    deadline = time.monotonic() + claim_wait_spread(wait_s)
    if wait_s > 0 and read is None:
        wakeups.claim_wakes_clear(node_id=node.pk)  # what they announced, the read below sees
    while True:
        if node.session != session:
            return [], node
        found = node_claim(node=node) if read is not False else []
        read = None
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
