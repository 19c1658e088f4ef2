"""In-app notifications (the bell) for events that otherwise go only by email or webhook."""
from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_save


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"

    def ready(self) -> None:
        from apps.audit.models import AuditEvent
        from apps.billing.signals import budget_alert_notified
        from apps.notifications import signals

        # The audit log is the one stream every app already feeds (see apps.webhooks.apps).
        post_save.connect(signals.on_audit_event, sender=AuditEvent, dispatch_uid="notifications.on_audit_event")
        budget_alert_notified.connect(signals.on_budget_alert_notified, dispatch_uid="notifications.on_budget_alert_notified")
