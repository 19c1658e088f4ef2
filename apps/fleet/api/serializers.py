"""Response shapes of the nodes API (documentation: the views answer dicts from apps.fleet.selectors)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class NodeRunSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(allow_null=True, help_text="Null for another team's run (its details are not shown).")
    name = serializers.CharField()
    project = serializers.CharField(allow_null=True, help_text="team/project; null for another team's run.")
    status = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    rank = serializers.IntegerField(allow_null=True, help_text="This node's rank in a multi-node run.")


class NodeDeviceSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField()
    kind = serializers.CharField(help_text="gpu, or cpu for a CPU slot.")
    model = serializers.CharField()
    uuid = serializers.CharField()
    memory_bytes = serializers.IntegerField()
    utilization = serializers.FloatField(
        allow_null=True, help_text="Percent busy at the last heartbeat; null when not reported (an idle CPU slot, a lost or "
                                   "offline node). A CPU slot's figure is its job's CPU time per slot and can pass 100.")
    power_w = serializers.FloatField(
        allow_null=True, help_text="Watts at the last heartbeat; null when not reported. A GPU's is measured (NVML); a CPU "
                                   "slot's is an estimate (CPU time x the agent's --watts-per-core).")
    memory_used_bytes = serializers.IntegerField(
        allow_null=True, help_text="Device memory in use at the last heartbeat (GPUs, NVML); null when not reported.")
    used = serializers.BooleanField()
    run = NodeRunSerializer(allow_null=True, help_text="The run holding this device, if any.")
    healthy = serializers.BooleanField(
        help_text="False after its agent reported a fatal fault (uncorrectable ECC errors, memory pages or rows waiting for "
                  "a reset, failed row remapping, a lost GPU): nothing new is placed on it and its runs were requeued. It "
                  "is healthy again when the agent says so (after the GPU is reset).")
    health_reason = serializers.CharField(help_text="Why it is unhealthy, in plain words; empty when healthy.")
    health_changed_at = serializers.DateTimeField(allow_null=True, help_text="When it last became (un)healthy (UTC).")


class NodeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    hostname = serializers.CharField()
    address = serializers.CharField()
    pool = serializers.CharField()
    state = serializers.CharField(help_text="ready, busy (every device in use), draining, lost or offline.")
    cpus = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    agent_version = serializers.CharField()
    heartbeat_age_s = serializers.FloatField(allow_null=True, help_text="Seconds since the last heartbeat.")
    last_heartbeat_at = serializers.DateTimeField(allow_null=True, help_text="When the last heartbeat arrived (UTC).")
    drain_deadline = serializers.DateTimeField(
        allow_null=True, help_text="When a draining node's running attempts are preempted (UTC); null: they may finish.")
    drained_by_admin = serializers.BooleanField(
        help_text="An administrator drained the node: it stays draining (through going lost and coming back, and agent "
                  "restarts) until undrained.")
    devices_total = serializers.IntegerField()
    devices_used = serializers.IntegerField()
    devices_free = serializers.IntegerField(help_text="Healthy devices no run holds.")
    devices_unhealthy = serializers.IntegerField(help_text="Devices with a fatal fault (see a device's health_reason).")
    devices = NodeDeviceSerializer(many=True)
    runs = NodeRunSerializer(many=True)


class PoolSummarySerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    kind = serializers.CharField()
    description = serializers.CharField()
    price_per_device_hour = serializers.CharField(help_text="A decimal number as a string.")
    devices_total = serializers.IntegerField(help_text="Over all the pool's nodes, not only this page's.")
    devices_free = serializers.IntegerField(help_text="Healthy devices no run holds.")


class NodePageSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = NodeSerializer(many=True)
    pools = PoolSummarySerializer(many=True, help_text="Every pool, whatever the page.")
    nodes = NodeSerializer(many=True, help_text="Deprecated: the same as results (kept for older clients).")


class NodeStateSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    state = serializers.CharField()


class NodeDrainSerializer(serializers.Serializer[Any]):
    deadline_s = serializers.IntegerField(required=False, min_value=0, max_value=7 * 86400,
                                          help_text="Seconds the running work may go on before it is preempted (0-604800, "
                                                    "default 0).")
