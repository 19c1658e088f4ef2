from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.jobtemplates.models import ApprovedImage, JobTemplate


class ImageRefSerializer(serializers.Serializer[ApprovedImage]):
    name = serializers.CharField(read_only=True)
    digest = serializers.CharField(read_only=True)


class JobTemplateSerializer(serializers.ModelSerializer[JobTemplate]):
    param_schema = serializers.JSONField(help_text="JSON Schema (draft 2020-12) of the parameters, with help text and bounds.")
    defaults = serializers.SerializerMethodField(help_text="Each parameter's default value.")
    resources = serializers.JSONField(
        help_text="Resource defaults (pool, nodes, devices_per_node, max_runtime_s, memory_gib_per_device, "
        "cpus_per_device) and limits (max_nodes, max_devices_per_node, max_runtime_limit_s, max_memory_gib_per_device, "
        "max_cpus_per_device). Memory and CPU cores are per device, scheduled as node capacity and enforced by cgroups; "
        "without a max_* limit the default is the limit, and without a default none is asked."
    )
    checkpoint_policy = serializers.JSONField(help_text="every_steps, every_seconds, keep_last, keep_best (metric:min|max).")
    environment = serializers.JSONField(help_text="The approved environment the job runs in.")
    image = ImageRefSerializer(read_only=True, allow_null=True,
                               help_text="The approved container image (name, digest) for container pools, or null.")

    class Meta:
        model = JobTemplate
        fields = [
            "id", "slug", "version", "title", "description", "kind", "entrypoint", "param_schema", "defaults", "resources",
            "checkpoint_policy", "launch", "grace_period_s", "max_restarts", "environment", "image", "total_steps_param", "published",
            "published_at", "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_defaults(self, template: JobTemplate) -> dict[str, Any]:
        properties = (template.param_schema or {}).get("properties", {})
        return {name: prop["default"] for name, prop in properties.items() if "default" in prop}


class ApprovedImageSerializer(serializers.ModelSerializer[ApprovedImage]):
    class Meta:
        model = ApprovedImage
        fields = ["id", "name", "digest", "description", "created_at"]
        read_only_fields = fields
