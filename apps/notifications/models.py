from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class NotificationKind(models.TextChoices):
    RUN_SUCCEEDED = "run.succeeded", "Run succeeded"
    RUN_FAILED = "run.failed", "Run failed"
    RUN_CANCELLED = "run.cancelled", "Run cancelled"
    RUN_PREEMPTED = "run.preempted", "Run preempted"
    RUN_LOST = "run.lost", "Run lost"
    NODE_LOST = "node.lost", "Node lost"
    BUDGET_ALERT = "budget.alert", "Budget alert"
    MODEL_PROMOTED = "model.promoted", "Model promoted"
    MODEL_ROLLED_BACK = "model.rolled_back", "Model rolled back"


class Notification(models.Model):
    """One thing one user was told in the portal (the bell). `key` names the happening (an audit
    event, a budget alert), so the same happening seen twice tells each user once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    team = models.ForeignKey("tenants.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=40, choices=NotificationKind.choices)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    key = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="notification_once_per_user_and_key")]
        indexes = [
            # The bell's poll: how many unread, for one user.
            models.Index(fields=["user"], condition=Q(read_at__isnull=True), name="notification_unread_by_user"),
            models.Index(fields=["user", "-created_at", "-id"], name="notification_latest_by_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.title}"

    @property
    def unread(self) -> bool:
        return self.read_at is None
