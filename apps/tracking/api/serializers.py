"""Response shapes of the tracking reads, for the OpenAPI schema (the selectors build the dicts;
these document every field, and Schemathesis checks that the answers match them)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# A metric value on the wire: a number, or one of the strings for non-finite values.
METRIC_VALUE_SCHEMA = {
    "oneOf": [{"type": "number"}, {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}],
    "nullable": True,
    "description": 'A number, or "NaN", "Infinity" or "-Infinity"; null when there is none.',
}


@extend_schema_field(METRIC_VALUE_SCHEMA)
class MetricValueField(serializers.JSONField):
    pass


@extend_schema_field({"oneOf": [{"type": "string", "enum": ["raw"]}, {"type": "integer"}],
                      "description": '"raw" for stored points, else the rollup level (0 = finest) the buckets come from.'})
class LevelField(serializers.JSONField):
    pass


class SeriesSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    run = serializers.IntegerField()
    x_axis = serializers.ChoiceField(choices=["step", "time"])
    level = LevelField()
    bucket_steps = serializers.IntegerField(help_text="Steps per stored bucket (1 for raw points).")
    count = serializers.IntegerField(help_text="Points in the whole series.")
    true_min = MetricValueField(help_text="The series' exact minimum (over the shown range when start/end are given).")
    true_max = MetricValueField()
    x = serializers.ListField(child=serializers.FloatField(), help_text="Last step (or Unix time) of each bucket.")
    mean = serializers.ListField(child=MetricValueField())
    min = serializers.ListField(child=MetricValueField())
    max = serializers.ListField(child=MetricValueField())


class MetricSeriesResponseSerializer(serializers.Serializer[Any]):
    run = serializers.IntegerField()
    series = SeriesSerializer(many=True, help_text="One per key asked for, in that order (empty x when a key has no points).")


class MetricSummarySerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    count = serializers.IntegerField()
    first = MetricValueField()
    last = MetricValueField()
    min = MetricValueField()
    max = MetricValueField()
    mean = MetricValueField(help_text="Mean of the finite values.")
    nonfinite = serializers.IntegerField(help_text="How many values were NaN or infinite.")
    first_step = serializers.IntegerField()
    last_step = serializers.IntegerField()
    last_wall_time = serializers.FloatField(help_text="Unix time of the point at last_step.")


class RunProgressSerializer(serializers.Serializer[Any]):
    steps_done = serializers.IntegerField()
    total_steps = serializers.IntegerField(allow_null=True)
    fraction = serializers.FloatField(allow_null=True)
    steps_per_s = serializers.FloatField(allow_null=True)
    eta_s = serializers.FloatField(allow_null=True, help_text="Seconds left at the current rate.")


class QueueStandingSerializer(serializers.Serializer[Any]):
    pool = serializers.CharField()
    position = serializers.IntegerField(allow_null=True, help_text="1 = next in its pool; null until the first pass.")
    estimated_start = serializers.DateTimeField(allow_null=True)
    estimated_start_low = serializers.DateTimeField(allow_null=True)
    estimated_start_high = serializers.DateTimeField(allow_null=True)


class StartStepSerializer(serializers.Serializer[Any]):
    key = serializers.ChoiceField(choices=["placed", "claimed", "started", "first_report"])
    title = serializers.CharField(help_text="The step in words: 'Process started'.")
    at = serializers.DateTimeField(allow_null=True, help_text="When the step happened; null while the attempt waits for it.")
    after_s = serializers.FloatField(allow_null=True, help_text="Seconds after the step before.")
    detail = serializers.CharField(help_text="The nodes, for the placement.")


class RunStartingSerializer(serializers.Serializer[Any]):
    attempt = serializers.IntegerField(help_text="The current attempt's number.")
    steps = StartStepSerializer(many=True)
    starting = serializers.BooleanField(help_text="True while the attempt is active and has not reported its first metric.")
    waiting_for = serializers.CharField(allow_null=True, help_text="The step it waits for while starting.")
    text = serializers.CharField(help_text='In words: "Starting: process started 4 s ago, waiting for the first metric."')


class KeysRunSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    status = serializers.CharField()
    status_reason = serializers.CharField()
    is_finished = serializers.BooleanField()
    progress = RunProgressSerializer()
    cost = serializers.CharField(help_text="Cost so far in the pool's currency, a decimal number as a string.")
    cost_text = serializers.CharField(help_text="The cost as pages show money, e.g. '$0.42'.")
    queue = QueueStandingSerializer(allow_null=True, help_text="Where a queued run stands in its pool; null otherwise.")
    starting = RunStartingSerializer(allow_null=True, help_text="The current attempt's start-up steps; null before the first placement.")


class MetricKeysResponseSerializer(serializers.Serializer[Any]):
    run = KeysRunSerializer()
    keys = MetricSummarySerializer(many=True)


class CheckpointSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    step = serializers.IntegerField()
    file_name = serializers.CharField()
    size = serializers.IntegerField(help_text="Bytes.")
    sha256 = serializers.CharField()
    metrics = serializers.DictField(child=serializers.JSONField(), help_text="Metrics at this step (as the job reported them, "
                                    "else the logged points at the step).")
    attempt = serializers.IntegerField(help_text="Attempt number that wrote it.")
    created_at = serializers.DateTimeField()
    deleted = serializers.BooleanField(help_text="Removed by retention; the record stays.")
    available = serializers.BooleanField(help_text="The file can be downloaded.")
    download_url = serializers.CharField(allow_null=True)
    best = serializers.BooleanField(help_text="Kept by retention as the run's best under checkpoint_policy.keep_best "
                                    "(the run page's best badge); false for every checkpoint when the policy keeps no best.")


class CheckpointPageSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = CheckpointSerializer(many=True)
    checkpoints = CheckpointSerializer(many=True, help_text="Deprecated: the same as results (kept for older clients).")


class LogChunkSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(help_text="Cursor: pass the last one seen as `after`.")
    attempt = serializers.IntegerField()
    rank = serializers.IntegerField()
    stream = serializers.CharField(help_text="stdout, stderr, or agent: the agent's note of output it dropped from a flooding job.")
    text = serializers.CharField()
    created_at = serializers.DateTimeField()


class HistoryEventSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    actor = serializers.CharField(help_text="A user's name, or a service such as scheduler or agent:HOST.")
    what = serializers.CharField(help_text="The change in words, e.g. 'attempt 1: stop requested'.")
    detail = serializers.CharField(help_text="What changed, e.g. 'queued → scheduled · on n1'; may be empty.")


class TimelineAttemptSerializer(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    status = serializers.CharField()
    reason = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    resumed_from_step = serializers.IntegerField(allow_null=True)


class RunHistorySerializer(serializers.Serializer[Any]):
    events = HistoryEventSerializer(many=True, help_text="Oldest first; the latest 200 at most.")
    older = serializers.BooleanField(help_text="True when older events were left out (they are in the audit log).")
    attempts = TimelineAttemptSerializer(many=True)


class LogPageSerializer(serializers.Serializer[Any]):
    chunks = LogChunkSerializer(many=True)
    next = serializers.IntegerField(help_text="The cursor for the next call (the last chunk's id, or `after` when none).")
    more = serializers.BooleanField(help_text="True when this page was full: call again at once with after=next.")
    q = serializers.CharField(required=False, help_text="With ?q=: the text searched for.")
    matches = serializers.IntegerField(required=False, help_text="With ?q=: matching lines on this page.")


class EnergyDeviceSerializer(serializers.Serializer[Any]):
    device = serializers.CharField(help_text="host:index, or host:node for a whole-node reading.")
    t = serializers.ListField(child=serializers.DateTimeField())
    power_w = serializers.ListField(child=serializers.FloatField(allow_null=True))
    utilization = serializers.ListField(child=serializers.FloatField(allow_null=True))
    energy_j = serializers.ListField(child=serializers.FloatField())
    estimated = serializers.BooleanField()


class EnergyCumulativeSerializer(serializers.Serializer[Any]):
    t = serializers.ListField(child=serializers.DateTimeField())
    energy_j = serializers.ListField(child=serializers.FloatField())


class EnergyResponseSerializer(serializers.Serializer[Any]):
    devices = EnergyDeviceSerializer(many=True)
    cumulative = EnergyCumulativeSerializer()
    total_j = serializers.FloatField()
    total_kwh = serializers.FloatField()
    estimated = serializers.BooleanField(help_text="True when some samples are estimates (no power sensor).")
    total_text = serializers.CharField(help_text="The total in the unit it reads best in, e.g. '477 J' or '147 Wh (0.147 kWh)'.")
    unit = serializers.ChoiceField(choices=["J", "Wh", "kWh"], help_text="The unit total_text uses; charts use it too.")
    unit_j = serializers.FloatField(help_text="Joules in one `unit`.")
    power_reported = serializers.BooleanField(help_text="Some sample has a power reading (whole-node CPU readings have none).")
    utilization_reported = serializers.BooleanField(help_text="Some sample has a utilization reading.")


class DiffRowSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="Dotted path of the value (e.g. optimizer.lr).")
    values = serializers.ListField(child=serializers.JSONField(allow_null=True), help_text="One per run, in the runs' order.")
    differs = serializers.BooleanField()


class RunEnergySerializer(serializers.Serializer[Any]):
    energy_j = serializers.FloatField()
    energy_wh = serializers.FloatField()
    estimated = serializers.BooleanField(help_text="Estimated (CPU slots, or power without an energy counter), not measured.")
    measured = serializers.BooleanField(help_text="Whether any energy was recorded at all.")
    steps_done = serializers.IntegerField()
    samples = serializers.FloatField(allow_null=True, help_text="Training samples seen, where the job reports them.")
    samples_source = serializers.CharField(help_text="Where samples comes from: the job's samples metric, or batch_size x steps.")
    wh_per_step = serializers.FloatField(allow_null=True, help_text="Energy of all attempts / steps done: per useful step.")
    wh_per_1k_samples = serializers.FloatField(allow_null=True)
    tokens = serializers.FloatField(allow_null=True, help_text="Tokens trained on, where the job logs a cumulative tokens metric.")
    wh_per_1k_tokens = serializers.FloatField(allow_null=True)
    j_per_1k_tokens = serializers.FloatField(allow_null=True)
    wh_text = serializers.CharField()
    wh_per_step_text = serializers.CharField()
    wh_per_1k_samples_text = serializers.CharField()
    wh_per_1k_tokens_text = serializers.CharField()


class CompareRunSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    # DRF's metaclass takes declared fields out of the class body, so this leaves Field.label alone.
    label = serializers.CharField(  # type: ignore[assignment]
        help_text='The run as the pages name it: "#41 name", or "#41" for a run without a name.')
    status = serializers.CharField()
    project = serializers.CharField(help_text="team/project")
    template = serializers.CharField()
    template_version = serializers.IntegerField()
    family = serializers.CharField()
    tags = serializers.DictField(child=serializers.JSONField())
    params = serializers.DictField(child=serializers.JSONField())
    lineage = serializers.DictField(child=serializers.JSONField(allow_null=True),
                                    help_text="Template, init checkpoint, code snapshot, parent run and what the job reported.")
    created_at = serializers.DateTimeField()
    url = serializers.CharField(help_text="The run's page.")
    summaries = serializers.DictField(child=MetricSummarySerializer(), help_text="Per chosen key.")
    energy = RunEnergySerializer(help_text="Energy of all attempts over every device of the gang; per step and per 1k samples.")


class EnvironmentAttemptSerializer(serializers.Serializer[Any]):
    run = serializers.IntegerField()
    attempt = serializers.IntegerField(allow_null=True, help_text="The attempt compared; null when the run has no record.")


class EnvironmentCompareSerializer(serializers.Serializer[Any]):
    attempts = EnvironmentAttemptSerializer(many=True, help_text="Per run: its latest attempt with a rank 0 record.")
    recorded = serializers.IntegerField(help_text="How many of the runs have a record.")
    # As CompareRunSerializer.label: the metaclass takes it out of the class body, Serializer.fields stays.
    fields = DiffRowSerializer(  # type: ignore[assignment]
        many=True, help_text="host, devices, gpu_driver, cuda_driver, torch, torch_cuda, cudnn, python, platform, seed, packages "
                             "(count and sha256 prefix), as display text.")
    packages = DiffRowSerializer(many=True, help_text="Distributions whose version differs (null: not installed), at most 500.")
    packages_differing = serializers.IntegerField()


class RunEnvironmentRecordSerializer(serializers.Serializer[Any]):
    attempt = serializers.IntegerField()
    node_rank = serializers.IntegerField()
    hostname = serializers.CharField()
    recorded_at = serializers.DateTimeField()
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.CharField(), help_text="The comparable fields as display text.")
    devices = serializers.ListField(child=serializers.DictField(), help_text="kind, index, model, uuid of the assigned devices.")
    cuda_available = serializers.BooleanField()
    problems = serializers.DictField(child=serializers.CharField(), help_text="Parts the agent could not read, and why.")
    packages_sha256 = serializers.CharField()
    packages_count = serializers.IntegerField()
    packages = serializers.ListField(child=serializers.CharField(), help_text='"name==version", sorted.')
    environment = serializers.DictField(help_text="The record as the agent sent it.")


class RunEnvironmentSerializer(serializers.Serializer[Any]):
    run = serializers.IntegerField()
    environments = RunEnvironmentRecordSerializer(many=True, help_text="By attempt, then node rank.")
    reported = serializers.DictField(help_text="What the job reported through the SDK (latest attempt), apart.")


class CompareResponseSerializer(serializers.Serializer[Any]):
    runs = CompareRunSerializer(many=True)
    keys = serializers.ListField(child=serializers.CharField(), help_text="The keys compared.")
    available_keys = serializers.ListField(child=serializers.CharField(), help_text="Every key any of the runs logged.")
    params = DiffRowSerializer(many=True)
    lineage = DiffRowSerializer(many=True)
    tags = DiffRowSerializer(many=True)
    environment = EnvironmentCompareSerializer(help_text="The agents' environment records: latest attempt, rank 0 node.")
    series = serializers.DictField(child=serializers.ListField(child=SeriesSerializer()),
                                   help_text="Per key: one downsampled series per run, in the runs' order.")


class MetricIngestResponseSerializer(serializers.Serializer[Any]):
    accepted = serializers.IntegerField(help_text="Points accepted from the batch.")
