from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.core.errors import ServiceError
from apps.runs.models import Run
from apps.runs.services.lifecycle import run_cancel


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Read-mostly: a run's status moves only through the transition table (apps.runs.services),
    so the admin shows runs and may cancel them, through the same service as the API, never edit them."""

    list_display = ["id", "name", "project", "template", "status", "priority", "pool", "submitted_by", "created_at", "finished_at"]
    list_filter = ["status", "priority", "pool", "template"]
    search_fields = ["=id", "name", "family", "project__slug", "project__team__slug"]
    list_select_related = ["project__team", "template", "pool", "submitted_by"]
    date_hierarchy = "created_at"
    actions = ["cancel_runs"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are submitted (checked, admitted, audited), never typed in

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the ledger and audit log refer to runs

    @admin.action(description="Cancel selected runs", permissions=["view"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        cancelled, refused = 0, []
        for run in queryset.order_by("pk"):
            try:
                run_cancel(run=run, user=request.user)
            except ServiceError as err:
                refused.append(f"run {run.pk}: {err.message}")
                continue
            cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} run(s).")
        for line in refused:
            self.message_user(request, line, level=messages.WARNING)
