from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.webhooks.models import WebhookDelivery, WebhookEndpoint
from apps.webhooks.services import webhook_team_endpoint_create


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Project endpoints are managed by team admins in the portal; team-wide ones (a team's budget
    alerts) are added here. A new team endpoint passes the same checks as the API's (address
    guard, secret length)."""

    list_display = ["pk", "project", "team", "url", "active", "created_at"]
    list_filter = ["active"]
    search_fields = ["url", "description"]

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        if change or obj.team is None:
            super().save_model(request, obj, form, change)
            return
        created = webhook_team_endpoint_create(team=obj.team, url=obj.url, secret=obj.secret, events=obj.events,
                                               description=obj.description, user=request.user)
        obj.pk = created.pk


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["pk", "endpoint", "event", "status", "attempts", "last_status_code", "created_at"]
    list_filter = ["status"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
