from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.notifications.models import Notification


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """Read only: notifications are made from audited happenings, never by hand."""

    list_display = ["pk", "user", "kind", "title", "created_at", "read_at"]
    list_filter = ["kind"]
    search_fields = ["title", "user__username"]
    readonly_fields = ["user", "team", "kind", "title", "body", "url", "key", "created_at", "read_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False
