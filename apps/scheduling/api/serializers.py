"""Response shapes of the queue API (used for output and for the OpenAPI schema)."""

from __future__ import annotations

from rest_framework import serializers

CODE_HELP = ("Stable code: quota, budget, behind_higher_priority, preempting, ran_longer_than_others, ... "
             "(empty until the first scheduling pass saw the run).")


class ReasonSerializer(serializers.Serializer):
    code = serializers.CharField(help_text=CODE_HELP)
    label = serializers.CharField(help_text="The code in a few plain words.")  # type: ignore[assignment]
    message = serializers.CharField(help_text="The full reason in plain words for your own runs; the label for others'.")


class EstimatedStartSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True, help_text="Estimated start; null where the replay did not reach it.")
    low = serializers.DateTimeField(allow_null=True, help_text="Earliest plausible start (runs ahead end early).")
    high = serializers.DateTimeField(allow_null=True, help_text="Latest plausible start (runs ahead take twice as long).")
    none_because = serializers.CharField(
        allow_null=True, required=False,
        help_text="Why there is no estimate, where no run ending can start it: held for budget, or no set of the "
                  "pool's ready nodes can hold its shape (the reason's message says what is missing). Null otherwise.")


class RunRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    project = serializers.CharField()
    template = serializers.CharField()
    submitted_by = serializers.CharField(allow_null=True)


class AheadTeamSerializer(serializers.Serializer):
    team = serializers.CharField()
    runs = serializers.IntegerField()
    devices = serializers.IntegerField()


class AheadSerializer(serializers.Serializer):
    runs = serializers.IntegerField(help_text="Runs ahead of this one in the pool's line, held ones left out.")
    devices = serializers.IntegerField(help_text="Devices those runs need.")
    by_team = AheadTeamSerializer(many=True)
    held = serializers.IntegerField(help_text="Runs higher in the line that the scheduler skips until a budget, quota or "
                                              "the hardware changes: listed ahead, but not in this run's way.")


class QueueEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1 = next in its pool.")
    priority = serializers.CharField()
    team = serializers.CharField()
    nodes = serializers.IntegerField()
    devices_per_node = serializers.IntegerField()
    devices = serializers.IntegerField()
    predicted_runtime_s = serializers.FloatField(help_text="From similar finished runs, else the max runtime.")
    predicted_runtime_text = serializers.CharField(help_text="The same in words, saying when it is only the run's limit.")
    predicted_from_history = serializers.BooleanField(help_text="False when no similar run has finished yet.")
    preemptible = serializers.BooleanField()
    reason = ReasonSerializer()
    estimated_start = EstimatedStartSerializer()
    waiting_since = serializers.DateTimeField()
    mine = serializers.BooleanField(help_text="A run of one of your teams.")
    run = RunRefSerializer(allow_null=True, help_text="Details of your own runs; null for other teams' runs.")
    ahead = AheadSerializer(required=False, help_text="Only on your own runs: who is ahead, by team.")


WITHIN_HELP = "Of those, started within max(10 min, 25% of their wait) of the estimate."


class AccuracyBucketSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="The bucket in a few words.")  # type: ignore[assignment]
    min_wait_s = serializers.FloatField(help_text="Runs counted waited longer than this, from the estimate to the start.")
    runs = serializers.IntegerField(help_text="Runs in the bucket that started in the window.")
    within = serializers.IntegerField(help_text=WITHIN_HELP)
    share = serializers.FloatField(allow_null=True, help_text="within / runs; null when no run is in the bucket yet.")
    median_abs_error_s = serializers.FloatField(allow_null=True, help_text="Median of |actual start - estimate|.")
    starts_now_share = serializers.FloatField(
        allow_null=True, help_text="The share a guess of \"starts now\" would have put as close: the baseline to beat.")
    summary = serializers.CharField(help_text="The bucket in one sentence; says so when it has no run yet.")


class RequeueAccuracySerializer(AccuracyBucketSerializer):
    started_at_once = serializers.IntegerField(help_text="Requeued runs that restarted within 20 s of their new "
                                                         "estimate, without waiting: not counted in `runs`.")


class AccuracySerializer(serializers.Serializer):
    window_days = serializers.IntegerField()
    runs = serializers.IntegerField(help_text="Runs that waited (started over 20 s after their estimate at submission) "
                                              "and started in the window. A requeued run's later wait is in "
                                              "`at_requeue`, not here.")
    within = serializers.IntegerField(help_text=WITHIN_HELP)
    share = serializers.FloatField(allow_null=True)
    median_abs_error_s = serializers.FloatField(allow_null=True)
    starts_now_share = serializers.FloatField(
        allow_null=True, help_text="The share a guess of \"starts now\" would have put as close: the baseline to beat.")
    started_at_once = serializers.IntegerField(help_text="Runs that started within 20 s of their estimate, without "
                                                         "waiting: not counted in `runs`.")
    summary = serializers.CharField()
    over_10m = AccuracyBucketSerializer(help_text="The estimates at submission of runs that waited over 10 minutes "
                                                  "(scored as the trace replay's `waited[\"10m\"]`).")
    over_1h = AccuracyBucketSerializer(help_text="The same for runs that waited over an hour.")
    at_requeue = RequeueAccuracySerializer(help_text="The new estimate a run got when it went back in line (preempted, "
                                                     "or its node failed), against its restart.")


class UtilizationSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    total_devices = serializers.IntegerField()
    used_devices = serializers.IntegerField()
    free_devices = serializers.IntegerField()
    stranded_devices = serializers.IntegerField(help_text="Free devices no waiting job's shape can use.")
    largest_free_block = serializers.IntegerField()
    queued_runs = serializers.IntegerField()
    queued_devices = serializers.IntegerField()


class PoolQueueSerializer(serializers.Serializer):
    pool = serializers.CharField()
    kind = serializers.CharField()
    nodes_ready = serializers.IntegerField(help_text="Nodes taking new runs now (0: nothing in this pool can start).")
    queued_runs = serializers.IntegerField()
    queued_devices = serializers.IntegerField()
    queue = QueueEntrySerializer(many=True)
    rules = serializers.ListField(child=serializers.CharField(), help_text="The pool's scheduling rules in plain words.")
    accuracy = AccuracySerializer()
    utilization = UtilizationSerializer(allow_null=True, help_text="The latest sample.")
    utilization_history = UtilizationSerializer(many=True, help_text="The last 24 hours, at most 288 points.")


class SchedulerSerializer(serializers.Serializer):
    last_pass_at = serializers.DateTimeField(allow_null=True)
    passes = serializers.IntegerField()
    last_duration_ms = serializers.FloatField(allow_null=True)
    last_placed = serializers.IntegerField()


class QueueSerializer(serializers.Serializer):
    generated_at = serializers.DateTimeField()
    scheduler = SchedulerSerializer()
    pools = PoolQueueSerializer(many=True)


class ForecastSerializer(serializers.Serializer):
    pool = serializers.CharField()
    starts_now = serializers.BooleanField(help_text="Devices are free for it now: it would start on the next pass.")
    position = serializers.IntegerField(help_text="Its place in the pool's line (1 = next); 0 when it starts now or "
                                                        "would be refused.")
    ahead = serializers.IntegerField(help_text="Waiting runs that would be ahead of it.")
    reason = ReasonSerializer()
    predicted_runtime_s = serializers.FloatField(help_text="Its predicted runtime.")
    runtime_basis = serializers.CharField(help_text="What the runtime prediction rests on.")
    estimated_start = EstimatedStartSerializer()
    summary = serializers.CharField(help_text="All of the above in one sentence.")
    refused = serializers.BooleanField(help_text="The submission would be refused (over budget, ...): `summary` and "
                                                 "`reason.message` say why, in the submission's own words.")
    pool_reason = serializers.CharField(help_text="Of several acceptable pools (resources.pools), why `pool`: where it "
                                        "would finish first; empty for one pool.")
