from django.apps import AppConfig
from django.db.models.signals import post_save


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"

    def ready(self) -> None:
        # "webhooks.deliver" is queued by name (services may not import tasks, which imports
        # services): registered here, eager Celery finds it.
        from apps.audit.models import AuditEvent
        from apps.billing.signals import budget_alert_notified
        from apps.tenants.views import PROJECT_PANELS
        from apps.webhooks import signals, tasks, views  # noqa: F401

        if views.project_webhooks_panel not in PROJECT_PANELS:
            PROJECT_PANELS.append(views.project_webhooks_panel)

        # Every state change is audited; the audit log is the one stream all apps already
        # feed, so listening there needs no hook in their services.
        post_save.connect(signals.on_audit_event, sender=AuditEvent, dispatch_uid="webhooks.on_audit_event")
        budget_alert_notified.connect(signals.on_budget_alert_notified, dispatch_uid="webhooks.on_budget_alert_notified")
