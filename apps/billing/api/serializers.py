from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from apps.billing import selectors
from apps.billing.costmodel import to_cents
from apps.billing.models import Budget, BudgetAction, Quota


class BudgetSerializer(serializers.ModelSerializer[Budget]):
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project = serializers.SerializerMethodField()
    spent = serializers.SerializerMethodField(help_text="Spent this period.")
    reserved = serializers.SerializerMethodField(help_text="Held by queued and running work.")
    remaining = serializers.SerializerMethodField(help_text="Left to admit new work against; never below 0.")
    overspent = serializers.SerializerMethodField(help_text="By how much spend and reservations exceed the amount; 0 if not.")

    class Meta:
        model = Budget
        fields = ["id", "team", "project", "period", "amount", "thresholds", "action", "spent", "reserved", "remaining",
                  "overspent", "created_at", "updated_at"]
        read_only_fields = fields

    def get_project(self, budget: Budget) -> str | None:
        return budget.project.full_slug if budget.project else None

    def _left(self, budget: Budget) -> selectors.BudgetLeft:
        # Read once per response for every budget in it (kept on the root, which a list's items share).
        found: dict[int, selectors.BudgetLeft] | None = getattr(self.root, "_budgets_left", None)
        if found is None or budget.pk not in found:
            instance = self.root.instance
            budgets = list(instance) if isinstance(instance, Iterable) else [budget]
            found = selectors.budgets_left(budgets=budgets or [budget],
                                           period=selectors.period_for(at=timezone.now()))
            self.root._budgets_left = found  # type: ignore[attr-defined]
        return found[budget.pk]

    def get_spent(self, budget: Budget) -> str:
        return str(to_cents(self._left(budget).spent))

    def get_reserved(self, budget: Budget) -> str:
        return str(to_cents(self._left(budget).reserved))

    def get_remaining(self, budget: Budget) -> str:
        return str(self._left(budget).remaining_cents)

    def get_overspent(self, budget: Budget) -> str:
        return str(self._left(budget).overspent_cents)


class BudgetWriteSerializer(serializers.Serializer[Any]):
    """Shape only; the service checks ranges and names the field and the limit."""

    team = serializers.SlugField(required=False, help_text="Team slug, for a team-level budget.")
    project = serializers.IntegerField(required=False, help_text="Project id, for a project budget.")
    amount = serializers.DecimalField(max_digits=14, decimal_places=2, required=False)
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=10)
    action = serializers.ChoiceField(choices=BudgetAction.choices, required=False)


class QuotaSerializer(serializers.ModelSerializer[Quota]):
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    warnings = serializers.SerializerMethodField(
        help_text="What to know about this quota, e.g. that guarantees in its pool exceed the pool's devices "
                  "(accepted: pools grow, and guarantees may be over-committed).")

    class Meta:
        model = Quota
        fields = ["id", "team", "pool", "guaranteed_devices", "borrow_limit", "warnings", "updated_at"]
        read_only_fields = fields

    def get_warnings(self, quota: Quota) -> list[str]:
        # Read once per response (kept on the root, which a list's items share), not once per quota.
        commitments: dict[int, selectors.PoolCommitment] | None = getattr(self.root, "_pool_commitments", None)
        if commitments is None:
            commitments = selectors.pool_commitments()
            self.root._pool_commitments = commitments  # type: ignore[attr-defined]
        pool = commitments.get(quota.pool_id)
        return [pool.note] if pool is not None and pool.over else []


class QuotaWriteSerializer(serializers.Serializer[Any]):
    team = serializers.SlugField(required=False)
    pool = serializers.SlugField(required=False)
    guaranteed_devices = serializers.IntegerField(required=False, min_value=0, max_value=100_000)
    borrow_limit = serializers.IntegerField(required=False, min_value=0, max_value=100_000)


class BudgetPeriodSerializer(serializers.Serializer[Any]):
    key = serializers.CharField(help_text="YYYY-MM")
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label; DRF pops it
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(help_text="Exclusive.")


class BudgetSummarySerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=["project", "team"], help_text="A project's own budget, or its team's.")
    amount = serializers.CharField(help_text="A decimal number as a string.")
    thresholds = serializers.ListField(child=serializers.IntegerField(), help_text="Percentages that raise an alert.")
    action = serializers.ChoiceField(choices=BudgetAction.choices, help_text="What happens at 100%.")


class BurndownPointSerializer(serializers.Serializer[Any]):
    date = serializers.DateField()
    spent = serializers.CharField(help_text="Cumulative spend by the end of that day (decimal string).")


class BudgetAlertSerializer(serializers.Serializer[Any]):
    threshold = serializers.IntegerField()
    at = serializers.DateTimeField()


class ProjectRefSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    full_slug = serializers.CharField(help_text="team/project")


class ProjectBudgetSerializer(serializers.Serializer[Any]):
    """GET /api/v1/projects/{id}/budget/: money as decimal strings in `currency`."""

    project = ProjectRefSerializer()
    period = BudgetPeriodSerializer()
    budget = BudgetSummarySerializer(allow_null=True, help_text="Null when neither the project nor its team has a budget.")
    currency = serializers.CharField()
    spent = serializers.CharField(help_text="Spent this period.")
    reserved = serializers.CharField(help_text="Held by queued and running work.")
    remaining = serializers.CharField(allow_null=True, help_text="Left to admit new work against; never below 0.")
    overspent = serializers.CharField(allow_null=True, help_text="By how much spend and reservations exceed the amount.")
    percent = serializers.FloatField(allow_null=True, help_text="Spent as a percentage of the budget.")
    forecast = serializers.CharField(help_text="Linear forecast of the period's spend.")
    burndown = BurndownPointSerializer(many=True)
    alerts = BudgetAlertSerializer(many=True, help_text="Thresholds crossed this period.")
