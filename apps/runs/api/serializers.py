from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.runs.detail_selectors import run_attempts, run_cost, run_energy, run_lineage
from apps.runs.models import CodeSnapshot, Run
from apps.runs.services.submission import TEXT_INPUTS, TextInput


def _text_field(text: TextInput) -> serializers.CharField:
    return serializers.CharField(required=False, allow_blank=True, default="", max_length=text.max_length,
                                 help_text=text.help or None)


class RunCreateSerializer(serializers.Serializer[Run]):
    """Only the shape is checked here; submission_validate checks the content and names bad fields.
    The free-text fields (name, ...) are the submission's TEXT_INPUTS."""

    project = serializers.CharField(help_text="Project id, or 'team/project' slug. Must be a project of your team.")
    template = serializers.CharField(help_text="Template slug; the latest published version unless template_version is given.")
    template_version = serializers.IntegerField(required=False, min_value=1, help_text="A specific published version.")
    params = serializers.JSONField(required=False, default=dict, help_text="Parameters; checked against the template's JSON Schema, "
                                   "defaults filled in.")
    # No default: a forecast without tags checks only what decides the place in line.
    tags = serializers.JSONField(required=False, help_text="Required: task, dataset, candidate (baseline, candidate, "
                                 "promoted, rejected), family; any other key: value strings. owner is set to you.")
    priority = serializers.CharField(required=False, default="normal", help_text="urgent, normal or low.")
    resources = serializers.JSONField(required=False, default=dict, help_text="Overrides of the template's pool, nodes, "
                                      "devices_per_node, max_runtime_s, preemptible; within its limits. pools: several "
                                      "acceptable pools (names); the scheduler places it where it would finish first.")
    init_run = serializers.CharField(required=False, allow_blank=True, default="", help_text="Fine-tune / evaluate: the run whose "
                                     "latest checkpoint to start from.")
    init_checkpoint = serializers.CharField(required=False, allow_blank=True, default="", help_text="Or a specific checkpoint id.")
    code_snapshot = serializers.CharField(required=False, allow_blank=True, default="", help_text="Custom template: sha256 (or id) "
                                          "of a code snapshot uploaded to this project.")
    secrets = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list, max_length=32,
                                    help_text="Names of project secrets the job gets as environment variables.")
    image = serializers.CharField(required=False, allow_blank=True, default="", max_length=400,
                                  help_text="Container image (name or name@sha256:digest): optional; if given, it must be the "
                                            "template's approved image, else a 400 naming it.")

    def get_fields(self) -> dict[str, serializers.Field]:
        declared = super().get_fields()
        texts = {text.name: _text_field(text) for text in TEXT_INPUTS}
        head = ("project", "template", "template_version")
        return {**{k: declared[k] for k in head}, **texts, **{k: v for k, v in declared.items() if k not in head}}


class RunPatchSerializer(serializers.Serializer[Any]):
    """What may change on a run after submission; the service checks the content (a 400 naming the field and limit)."""

    notes = serializers.JSONField(required=False, help_text="Free text, at most 2,000 characters; replaces the run's notes.")
    tags = serializers.JSONField(required=False, help_text="The run's tags, replaced whole and checked as a submission's "
                                 "(task, dataset, candidate, family required); owner stays the submitter.")


class TrialsRequestSerializer(serializers.Serializer[Any]):
    project = serializers.CharField(required=False, help_text="Project id or 'team/project' the submission would go to: "
                                                              "one of your teams' projects, else a 400 naming it.")
    template = serializers.CharField(help_text="Template slug; the latest published version unless template_version is given.")
    template_version = serializers.IntegerField(required=False, min_value=1)
    params = serializers.JSONField(required=False, default=dict, help_text="The parameters the submission would send.")


class TrialsSerializer(serializers.Serializer[Any]):
    trials = serializers.IntegerField(help_text="Runs the submission would queue: a sweep's points, else 1.")
    sweep = serializers.BooleanField()


class AttemptSummarySerializer(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    status = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField(), help_text="Hostnames of the nodes, by node rank.")
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()


class EstimateSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField(allow_null=True, help_text="Estimated start (queued runs).")
    low = serializers.DateTimeField(allow_null=True, help_text="Earliest likely start.")
    high = serializers.DateTimeField(allow_null=True, help_text="Latest likely start.")
    queue_position = serializers.IntegerField(allow_null=True, help_text="1 = next in its pool.")


class EnergySerializer(serializers.Serializer[Any]):
    joules = serializers.FloatField()
    kwh = serializers.FloatField()
    estimated = serializers.BooleanField(help_text="True when some samples are estimates (no power sensor).")


class CostSerializer(serializers.Serializer[Any]):
    amount = serializers.DecimalField(max_digits=14, decimal_places=4, help_text="Device-hours used × the pool's price.")
    price_per_device_hour = serializers.DecimalField(max_digits=12, decimal_places=4)


class ResourcesSerializer(serializers.Serializer[Any]):
    pool = serializers.CharField(help_text="The pool it runs (or is queued) in: of several acceptable pools, the one chosen.")
    pools = serializers.ListField(child=serializers.CharField(), help_text="Every acceptable pool (empty: pool only).")
    pool_reason = serializers.CharField(help_text="Why it is in `pool` when it named several, e.g. \"placed in h100: "
                                        "predicted to finish 35 min sooner than a100 (pace 1.8×)\".")
    nodes = serializers.IntegerField()
    devices_per_node = serializers.IntegerField(help_text="0 for a sweep's parent, which holds no devices.")
    max_runtime_s = serializers.IntegerField()
    preemptible = serializers.BooleanField()
    memory_gib_per_device = serializers.FloatField(help_text="Memory asked per device, scheduled and enforced (0: none asked).")
    cpus_per_device = serializers.FloatField(help_text="CPU cores asked per device, scheduled and enforced (0: none asked).")


class RunSerializer(serializers.ModelSerializer[Run]):
    project = serializers.IntegerField(source="project_id", read_only=True)
    project_slug = serializers.CharField(source="project.full_slug", read_only=True)
    template = serializers.CharField(source="template.slug", read_only=True)
    template_version = serializers.IntegerField(source="template.version", read_only=True)
    submitted_by = serializers.CharField(source="submitted_by.username", read_only=True, default=None)
    parent = serializers.IntegerField(source="parent_id", read_only=True, allow_null=True)  # type: ignore[assignment]
    progress = serializers.FloatField(read_only=True, allow_null=True, help_text="0..1 from steps_done / total_steps.")
    tags = serializers.DictField(child=serializers.CharField(), read_only=True)
    tracked_only = serializers.BooleanField(read_only=True, help_text="Logged through /mlflow/ by an MLflow client: never "
                                            "scheduled or run by Trainyard, holds no devices, costs nothing.")

    class Meta:
        model = Run
        fields = [
            "id", "name", "project", "project_slug", "template", "template_version", "submitted_by", "status", "reason_code",
            "status_reason", "priority", "tags", "family", "parent", "progress", "steps_done", "total_steps", "created_at",
            "queued_at", "started_at", "finished_at", "updated_at", "tracked_only",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    params = serializers.JSONField(read_only=True, help_text="Parameters with defaults filled in.")
    resources = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    estimated_start = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    energy = serializers.SerializerMethodField()
    lineage = serializers.SerializerMethodField(help_text="The job's lineage report plus template, init checkpoint, code snapshot, "
                                                "parent.")
    children = serializers.SerializerMethodField(help_text="Ids of a sweep's child runs.")
    entrypoint = serializers.CharField(read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, *(t.name for t in TEXT_INPUTS if t.name not in RunSerializer.Meta.fields),
                  "params", "resources", "entrypoint", "attempts", "estimated_start", "cost", "energy",
                  "lineage", "children", "cancel_requested_at", "max_restarts", "restarts"]
        read_only_fields = fields

    @extend_schema_field(ResourcesSerializer)
    def get_resources(self, run: Run) -> dict[str, Any]:
        return {"pool": run.pool.name, "pools": list(run.pools or []), "pool_reason": run.pool_reason,
                "nodes": run.nodes, "devices_per_node": run.devices_per_node,
                "max_runtime_s": run.max_runtime_s, "preemptible": run.preemptible,
                "memory_gib_per_device": run.memory_bytes_per_device / 2**30, "cpus_per_device": run.cpus_per_device}

    @extend_schema_field(AttemptSummarySerializer(many=True))
    def get_attempts(self, run: Run) -> list[dict[str, Any]]:
        return AttemptSummarySerializer(run_attempts(run=run), many=True).data  # type: ignore[return-value]

    @extend_schema_field(EstimateSerializer)
    def get_estimated_start(self, run: Run) -> dict[str, Any]:
        return EstimateSerializer({"at": run.estimated_start, "low": run.estimated_start_low, "high": run.estimated_start_high,
                                   "queue_position": run.queue_position}).data

    @extend_schema_field(CostSerializer)
    def get_cost(self, run: Run) -> dict[str, Any]:
        return CostSerializer({"amount": run_cost(run=run), "price_per_device_hour": run.pool.price_per_device_hour}).data

    @extend_schema_field(EnergySerializer)
    def get_energy(self, run: Run) -> dict[str, Any]:
        return EnergySerializer(run_energy(run=run)).data

    @extend_schema_field(serializers.JSONField())
    def get_lineage(self, run: Run) -> dict[str, Any]:
        return run_lineage(run=run)

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_children(self, run: Run) -> list[int]:
        return list(run.children.order_by("pk").values_list("pk", flat=True))


class CodeSnapshotSerializer(serializers.ModelSerializer[CodeSnapshot]):
    project = serializers.IntegerField(source="project_id", read_only=True)

    class Meta:
        model = CodeSnapshot
        fields = ["id", "project", "sha256", "size", "git_commit", "created_at"]
        read_only_fields = fields


class CodeSnapshotUploadSerializer(serializers.Serializer[CodeSnapshot]):
    project = serializers.CharField(help_text="Project id or 'team/project'.")
    file = serializers.FileField(help_text=".tar.gz of your code, at most TRAINYARD_MAX_SNAPSHOT_BYTES (20 MB); no absolute paths, "
                                 "'..', links or devices.")
    git_commit = serializers.CharField(required=False, allow_blank=True, default="", max_length=64)
