"""Money and limits: dated pool prices, the append-only usage ledger, budgets, alerts, quotas.

The ledger (UsageEntry) is never updated or deleted: accrual appends entries for new time,
corrections are new entries. Run/attempt references carry no database constraint and no
cascade, so money records outlive whatever they describe.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


def default_thresholds() -> list[int]:
    return [50, 80, 100]


class PoolPrice(models.Model):
    """The price of a device-hour in a pool from ``effective_from`` until the next price."""

    pool = models.ForeignKey("nodes.NodePool", on_delete=models.CASCADE, related_name="prices")
    price_per_device_hour = models.DecimalField(max_digits=12, decimal_places=4, validators=[MinValueValidator(Decimal("0"))])
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool_id", "effective_from"]
        constraints = [models.UniqueConstraint(fields=["pool", "effective_from"], name="poolprice_unique_start")]

    def __str__(self) -> str:
        return f"{self.pool_id} ${self.price_per_device_hour}/device-hour from {self.effective_from:%Y-%m-%d %H:%M}"


class EntryKind(models.TextChoices):
    ACCRUAL = "accrual", "Accrual"
    CLOSE = "close", "Close"
    CORRECTION = "correction", "Correction"


class UsageEntry(models.Model):
    attempt = models.ForeignKey("runs.Attempt", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    run = models.ForeignKey("runs.Run", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="usage_entries")
    team = models.ForeignKey("tenants.Team", on_delete=models.PROTECT, related_name="usage_entries")
    pool = models.ForeignKey("nodes.NodePool", on_delete=models.PROTECT, related_name="usage_entries")
    template = models.ForeignKey("jobtemplates.JobTemplate", on_delete=models.PROTECT, related_name="usage_entries")
    kind = models.CharField(max_length=16, choices=EntryKind.choices, default=EntryKind.ACCRUAL)
    period_start = models.DateTimeField(db_index=True)
    period_end = models.DateTimeField()
    devices = models.PositiveIntegerField(default=0)
    device_seconds = models.DecimalField(max_digits=20, decimal_places=3, default=Decimal("0"))
    price_per_device_hour = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal("0"))
    cost = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal("0"))
    energy_kwh = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal("0"))
    co2_g = models.DecimalField(max_digits=18, decimal_places=3, default=Decimal("0"))
    outcome = models.CharField(max_length=16, blank=True, help_text="How the attempt ended (on its close entry).")
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["period_start", "id"]
        verbose_name_plural = "usage entries"
        indexes = [
            models.Index(fields=["attempt", "period_end"]),
            models.Index(fields=["project", "period_start"]),
            models.Index(fields=["team", "period_start"]),
        ]
        constraints = [
            # Two accrual workers racing on the same attempt: the second insert fails instead
            # of charging the same time twice.
            models.UniqueConstraint(
                fields=["attempt", "period_start"],
                condition=Q(kind__in=["accrual", "close"]),
                name="usage_unique_accrual_start",
            ),
            models.UniqueConstraint(fields=["attempt"], condition=Q(kind="close"), name="usage_one_close_per_attempt"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} attempt {self.attempt_id} {self.period_start:%Y-%m-%d %H:%M} ${self.cost}"


class BudgetPeriod(models.TextChoices):
    MONTHLY = "monthly", "Monthly"


class BudgetAction(models.TextChoices):
    BLOCK_NEW = "block_new", "Block new runs"
    STOP_RUNNING = "stop_running", "Block new runs and stop running ones"


class Budget(models.Model):
    """A spending limit per period for a project, or for a whole team when project is empty."""

    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="budgets")
    project = models.ForeignKey("tenants.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(max_length=16, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTHLY)
    amount = models.DecimalField(max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal("0"))])
    thresholds = models.JSONField(default=default_thresholds)
    action = models.CharField(max_length=16, choices=BudgetAction.choices, default=BudgetAction.BLOCK_NEW)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team_id", "project_id"]
        constraints = [
            models.UniqueConstraint(fields=["project"], condition=Q(project__isnull=False), name="budget_one_per_project"),
            models.UniqueConstraint(fields=["team"], condition=Q(project__isnull=True), name="budget_one_team_level"),
        ]

    def __str__(self) -> str:
        return self.scope_label

    @property
    def scope_label(self) -> str:
        return self.project.full_slug if self.project_id and self.project else f"{self.team.slug} (team)"


class BudgetAlert(models.Model):
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period = models.CharField(max_length=16, help_text="Period key, e.g. 2026-11.")
    threshold = models.PositiveIntegerField()
    spent = models.DecimalField(max_digits=18, decimal_places=6)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["budget", "period", "threshold"], name="budgetalert_once_per_period")]

    def __str__(self) -> str:
        return f"{self.budget} {self.period} {self.threshold}%"


class Quota(models.Model):
    """Devices a team is guaranteed in a pool, and how many more it may borrow when idle."""

    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey("nodes.NodePool", on_delete=models.CASCADE, related_name="quotas")
    guaranteed_devices = models.PositiveIntegerField(default=0)
    borrow_limit = models.PositiveIntegerField(default=0, help_text="Devices beyond the guarantee, when others leave them idle.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team_id", "pool_id"]
        constraints = [models.UniqueConstraint(fields=["team", "pool"], name="quota_unique_team_pool")]

    def __str__(self) -> str:
        # Names, not ids: this is what the audit log shows as the object (a read each, rarely).
        return f"{self.team.slug} in {self.pool.name}: {self.guaranteed_devices} guaranteed + {self.borrow_limit} to borrow"
