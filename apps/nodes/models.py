from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models


class PoolKind(models.TextChoices):
    BATCH = "batch", "Batch"
    INTERACTIVE = "interactive", "Interactive"


class PoolBackend(models.TextChoices):
    AGENT = "agent", "Trainyard agents"
    # An existing Slurm cluster runs the pool's jobs (apps.slurm); the scheduler places nothing there.
    SLURM = "slurm", "Slurm cluster"


# Checks of a pool's scheduler options, registered by the scheduler (which this app may not
# import): each says what is wrong with the JSON, naming the option, or returns None.
POLICY_CHECKS: list[Callable[[Any], str | None]] = []


class NodePool(models.Model):
    """A hardware class: nodes in a pool are interchangeable for scheduling and billing."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.CharField(max_length=300, blank=True)
    kind = models.CharField(max_length=16, choices=PoolKind.choices, default=PoolKind.BATCH)
    backend = models.CharField(max_length=16, choices=PoolBackend.choices, default=PoolBackend.AGENT)
    # Current list price; the billing app keeps dated prices so a change never rewrites the past.
    price_per_device_hour = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal("0"))
    carbon_g_per_kwh = models.DecimalField(max_digits=8, decimal_places=2, default=Decimal("400"))
    # Per-pool scheduling policy knobs (see apps.scheduling); empty means the defaults.
    policy = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        for check in POLICY_CHECKS:
            if problem := check(self.policy):
                raise ValidationError({"policy": problem})


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    LOST = "lost", "Lost"
    OFFLINE = "offline", "Offline"


class Node(models.Model):
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=253)
    # The agent's stable identity (kept in its workdir) so a restarted agent is the same node.
    agent_uid = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY)
    address = models.CharField(max_length=253, blank=True, help_text="Address other ranks use to reach this node.")
    cpus = models.PositiveIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    agent_version = models.CharField(max_length=50, blank=True)
    protocol_version = models.PositiveIntegerField(default=1)
    # Bumped on every (re-)registration: requests carrying an older session are refused.
    session = models.PositiveIntegerField(default=0)
    credential_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True, db_index=True)
    drain_deadline = models.DateTimeField(null=True, blank=True)
    # An administrator's drain (not the agent's own shutdown drain): it outlasts the node going
    # silent and coming back, and an agent restart, until an administrator undrains the node.
    drained_by_admin = models.BooleanField(default=False)
    last_status = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["pool__name", "hostname"]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.pool.name})"


class DeviceKind(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU slot"


class Device(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=DeviceKind.choices)
    uuid = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    memory_bytes = models.BigIntegerField(default=0)
    utilization = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    memory_used_bytes = models.BigIntegerField(null=True, blank=True)
    # A fatal fault the agent reported (NVML: uncorrectable ECC errors, ...): nothing new is placed
    # on an unhealthy device until the agent reports it healthy again (after a reset).
    healthy = models.BooleanField(default=True)
    health_reason = models.CharField(max_length=500, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_id", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="device_unique_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node.hostname}:{self.kind}{self.index}"


class JoinToken(models.Model):
    """Made by an admin per pool; an agent trades it for a node credential. Hashed at rest."""

    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="join_tokens")
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.prefix}… for {self.pool.name}"


class SweepWatch(models.Model):
    """What the lost-node sweep weighs a node's silence against (one row).

    When the sweep last ran: a long gap means the sweeper itself was down (worker, broker or
    database outage), so silent nodes then get one node timeout of grace. And the web tier's
    pulse: the latest stretch of time in which it was up to hear agents. A node's silence counts
    only while the web tier was up (README: "When is a node lost?")."""

    SINGLETON = 1
    last_sweep_at = models.DateTimeField(null=True, blank=True)
    grace_until = models.DateTimeField(null=True, blank=True)
    # Every web process pulses every TRAINYARD_WEB_PULSE_S; a break of more than three pulses
    # starts a new stretch. Null: no web process has pulsed yet.
    web_up_since = models.DateTimeField(null=True, blank=True)
    web_pulse_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"last sweep {self.last_sweep_at}, grace until {self.grace_until}, web up {self.web_up_since}-{self.web_pulse_at}"
