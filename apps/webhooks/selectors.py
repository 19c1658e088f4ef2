from __future__ import annotations

from django.db.models import QuerySet

from apps.tenants.models import Project
from apps.webhooks.models import WebhookDelivery, WebhookEndpoint


def endpoint_list(*, project: Project) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(project=project).order_by("pk")


def delivery_list(*, project: Project) -> QuerySet[WebhookDelivery]:
    """The project's delivery log, newest first."""
    return (WebhookDelivery.objects.filter(endpoint__project=project).select_related("endpoint", "event")
            .order_by("-created_at", "-pk"))
