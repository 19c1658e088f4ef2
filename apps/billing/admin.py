from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.billing.models import Budget, BudgetAlert, PoolPrice, Quota, UsageEntry


@admin.register(UsageEntry)
class UsageEntryAdmin(admin.ModelAdmin):
    """Read-only: the ledger is append-only; corrections are new entries made by services."""

    list_display = ["id", "kind", "period_start", "period_end", "team", "project", "pool", "run_id", "attempt_id", "cost", "outcome"]
    list_filter = ["kind", "team", "pool"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PoolPrice)
class PoolPriceAdmin(admin.ModelAdmin):
    list_display = ["pool", "price_per_device_hour", "effective_from"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a price change is a new dated price, never an edit of the past


admin.site.register(Budget)
admin.site.register(BudgetAlert)
admin.site.register(Quota)
