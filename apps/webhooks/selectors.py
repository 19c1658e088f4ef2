from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, project_list
from apps.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint


def endpoint_list(*, project: Project) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(project=project).order_by("pk")


def delivery_list(*, project: Project) -> QuerySet[WebhookDelivery]:
    """The project's delivery log, newest first."""
    return (WebhookDelivery.objects.filter(endpoint__project=project).select_related("endpoint", "event")
            .order_by("-created_at", "-pk"))


def webhooks_visible(*, user: AnyUser, project: Project) -> bool:
    """Who may see a project's webhook page: every member of its team, as for the project itself."""
    return project_list(user=user).filter(pk=project.pk).exists()


def webhook_summary(*, project: Project) -> dict[str, int]:
    """Counts for the project page's card: endpoints, disabled ones, deliveries that failed for good."""
    endpoints = endpoint_list(project=project).aggregate(total=Count("pk"), disabled=Count("pk", filter=Q(active=False)))
    failed = WebhookDelivery.objects.filter(endpoint__project=project, status=DeliveryStatus.FAILED).count()
    return {"endpoints": endpoints["total"], "disabled": endpoints["disabled"], "failed": failed}
