from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.registry import selectors
from apps.registry.models import ModelVersion, RegisteredModel, Stage


class ThresholdSerializer(serializers.Serializer):
    metric = serializers.CharField()
    op = serializers.ChoiceField(choices=list(selectors.OPS))
    value = serializers.FloatField()


class ModelVersionSerializer(serializers.ModelSerializer):
    model = serializers.IntegerField(source="model_id", read_only=True)
    source_run = serializers.IntegerField(source="source_run_id", read_only=True)
    checkpoint = serializers.IntegerField(source="checkpoint_id", read_only=True, allow_null=True)
    artifact = serializers.IntegerField(source="artifact_id", read_only=True, allow_null=True)
    evidence_run = serializers.IntegerField(source="evidence_run_id", read_only=True, allow_null=True)
    replaced = serializers.SerializerMethodField()
    created_by = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = ["id", "model", "number", "description", "stage", "stage_changed_at", "source_run", "checkpoint", "artifact", "lineage",
                  "evidence_run", "evidence", "replaced", "cost", "created_by", "created_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_replaced(self, obj: ModelVersion) -> int | None:
        return obj.replaced.number if obj.replaced_id and obj.replaced else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_created_by(self, obj: ModelVersion) -> str | None:
        return obj.created_by.get_username() if obj.created_by else None

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=2, help_text="Its training family's spend (USD)."))
    def get_cost(self, obj: ModelVersion) -> str:
        return str(selectors.version_cost(version=obj))


class RegisteredModelSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.full_slug", read_only=True)
    project_id = serializers.IntegerField(read_only=True)
    thresholds = ThresholdSerializer(many=True, read_only=True)
    production = serializers.SerializerMethodField()

    class Meta:
        model = RegisteredModel
        fields = ["id", "project", "project_id", "name", "description", "thresholds", "production", "created_at", "updated_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True, help_text="The number of the version in production."))
    def get_production(self, obj: RegisteredModel) -> int | None:
        return next((v.number for v in obj.versions.all() if v.stage == Stage.PRODUCTION), None)


class RegisteredModelDetailSerializer(RegisteredModelSerializer):
    versions = ModelVersionSerializer(many=True, read_only=True)

    class Meta(RegisteredModelSerializer.Meta):
        fields = [*RegisteredModelSerializer.Meta.fields, "versions"]
        read_only_fields = fields


class ModelWriteSerializer(serializers.Serializer):
    """Shapes only; the rules (thresholds, name length) are the service's, so the API and the page agree."""

    project = serializers.CharField(required=False, help_text="Project id or 'team/project'.")
    name = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    thresholds = serializers.JSONField(required=False, help_text='[{"metric": "val_accuracy", "op": ">=", "value": 0.9}]')


class VersionCreateSerializer(serializers.Serializer):
    checkpoint = serializers.CharField(required=False, allow_blank=True, help_text="A checkpoint id of a run of this project.")
    run = serializers.CharField(required=False, allow_blank=True, help_text="A run id: its latest checkpoint (if no checkpoint).")
    artifact = serializers.CharField(required=False, allow_blank=True, help_text="An artifact id (a model file) instead of a checkpoint.")
    description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)


class StageSerializer(serializers.Serializer):
    stage = serializers.CharField(help_text="candidate, staging or archived (production: use promote).")


class PromoteSerializer(serializers.Serializer):
    evidence_run = serializers.CharField(required=False, allow_blank=True,
                                         help_text="The evaluate run to count as evidence; default: the latest passing one.")


class VersionCostSerializer(serializers.Serializer):
    team = serializers.CharField()
    project = serializers.CharField()
    model = serializers.CharField()
    model_id = serializers.IntegerField()
    version = serializers.IntegerField()
    stage = serializers.CharField()
    family = serializers.CharField()
    source_run = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=18, decimal_places=2)

    def to_representation(self, instance: Any) -> Any:
        return dict(instance)
