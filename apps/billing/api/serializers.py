from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.billing.models import Budget, BudgetAction, Quota


class BudgetSerializer(serializers.ModelSerializer[Budget]):
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = ["id", "team", "project", "period", "amount", "thresholds", "action", "created_at", "updated_at"]
        read_only_fields = fields

    def get_project(self, budget: Budget) -> str | None:
        return budget.project.full_slug if budget.project else None


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

    class Meta:
        model = Quota
        fields = ["id", "team", "pool", "guaranteed_devices", "borrow_limit", "updated_at"]
        read_only_fields = fields


class QuotaWriteSerializer(serializers.Serializer[Any]):
    team = serializers.SlugField(required=False)
    pool = serializers.SlugField(required=False)
    guaranteed_devices = serializers.IntegerField(required=False, min_value=0, max_value=100_000)
    borrow_limit = serializers.IntegerField(required=False, min_value=0, max_value=100_000)
