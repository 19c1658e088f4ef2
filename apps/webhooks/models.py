"""Outgoing webhooks: endpoints, the events emitted to them, one delivery per pair.

An endpoint belongs to a project (its runs, nodes and budgets) or to a whole team (the team's
budget alerts, which finance and team admins configure in the admin); an event has the same
scope as the endpoints it goes to. Both are delivered by the one system in services.py.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class EventType(models.TextChoices):
    RUN_SUCCEEDED = "run.succeeded", "Run succeeded"
    RUN_FAILED = "run.failed", "Run failed"
    RUN_CANCELLED = "run.cancelled", "Run cancelled"
    RUN_PREEMPTED = "run.preempted", "Run preempted"
    BUDGET_THRESHOLD = "budget.threshold", "Budget threshold crossed"
    NODE_LOST = "node.lost", "Node lost"
    MODEL_PROMOTED = "model.promoted", "Model version promoted"
    MODEL_ROLLED_BACK = "model.rolled_back", "Model rolled back"
    PING = "ping", "Test ping"


def _one_scope() -> models.Q:
    return models.Q(project__isnull=False, team__isnull=True) | models.Q(project__isnull=True, team__isnull=False)


class WebhookEndpoint(models.Model):
    """Where a project's (or a team's) events are POSTed, signed with HMAC-SHA256 over "<timestamp>.<body>"."""

    project = models.ForeignKey("tenants.Project", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="webhook_endpoints")
    # Set instead of project: a team-wide endpoint (budget alerts of every budget of the team).
    team = models.ForeignKey("tenants.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=128)
    # Empty: every event type.
    events = models.JSONField(default=list, blank=True)
    description = models.CharField(max_length=200, blank=True, default="")
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]
        constraints = [models.CheckConstraint(condition=_one_scope(), name="webhook_endpoint_one_scope")]

    def __str__(self) -> str:
        return f"{self.project_id} -> {self.url}" if self.project_id else f"team {self.team_id} -> {self.url}"

    @property
    def owner_team_id(self) -> int | None:
        """The team whose admins own it (for the audit log)."""
        return self.project.team_id if self.project is not None else self.team_id

    def wants(self, event_type: str) -> bool:
        return not self.events or event_type in self.events


class WebhookEvent(models.Model):
    """One thing that happened; ``key`` makes emitting the same happening twice a no-op."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey("tenants.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_events")
    team = models.ForeignKey("tenants.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_events")
    type = models.CharField(max_length=40, choices=EventType.choices)
    key = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["project", "key"], name="webhook_event_unique_key"),
            models.UniqueConstraint(fields=["team", "key"], condition=models.Q(project__isnull=True),
                                    name="webhook_team_event_unique_key"),
            models.CheckConstraint(condition=_one_scope(), name="webhook_event_one_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SUCCEEDED = "succeeded", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One event to one endpoint: attempted until a 2xx, a permanent 4xx, or out of attempts."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_retry_at = models.DateTimeField(null=True, blank=True)
    # While SENDING: a worker holds it until then; past it, another may take it over.
    lease_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["endpoint", "event"], name="webhook_delivery_once")]
        indexes = [models.Index(fields=["status", "next_retry_at"])]
        verbose_name_plural = "webhook deliveries"  # the admin said "Webhook deliverys" (issue 29)

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}: {self.status}"
