"""The agent protocol: message shapes shared by the agent (agents/) and the server (apps/fleet/api).

Standard library only, so the agent runs without Django. Bump PROTOCOL_VERSION on any change
that an older peer could misread; the server refuses registrations from a newer major version.

Endpoints (all under /api/v1/agent/, JSON, ``Authorization: Node <credential>`` except register):
  POST register/                 RegisterRequest -> RegisterResponse
  POST heartbeat/                HeartbeatRequest -> HeartbeatResponse (409 = session superseded)
  POST claim/                    ClaimRequest -> ClaimResponse (long poll, at most MAX_CLAIM_WAIT_S)
  POST events/                   AttemptEvent -> {"ok": true}
  POST logs/                     LogBatch -> {"accepted": n} (each body under MAX_BODY_BYTES)
  POST energy/                   EnergyBatch -> {"accepted": n}
  POST progress/                 ProgressReport -> {"ok": true}
  POST checkpoints/              CheckpointReport -> {"id", "stored", "upload": UploadPlan} (no plan once
                                 stored, or for an agent of protocol < 5)
  POST checkpoints/<id>/complete/  CheckpointComplete -> {"stored": false, "checking": true} (the size was
                                 right; a server worker checks the sha256, then records it stored)
  GET  checkpoints/<id>/download/  -> DownloadLink (for resume and init checkpoints)
  GET  snapshots/<sha256>/download/  -> DownloadLink (a run's code snapshot)
  POST checkpoints/deleted/      CheckpointDeleted -> {"deleted": n} (the SDK's keep-last-K removed a file)
  PUT  checkpoints/<id>/file/    raw bytes -> {"stored": true} (protocol < 5: the bytes through the web)
  GET  checkpoints/<id>/file/    raw bytes (protocol < 5)
Upload plans and download links hold URLs of the object store (absolute, S3) or of the web
(relative, the local store): the agent sends them no credential and follows them directly.
  POST metrics/                  MetricBatch (owned by apps.tracking) -> {"accepted": n}
  POST lineage/                  LineageReport (owned by apps.tracking) -> {"stored": bool} (409 code
                                 lineage_immutable: this attempt and rank already hold another record)
  POST rendezvous/               RendezvousReport -> RendezvousInfo (rank 0 reports its port; the others ask)
  POST artifacts/                ArtifactReport -> ArtifactPlan (owned by apps.artifacts: a file the job
                                 logged with trainyard.log_artifact; 404 from a server without artifacts)
  POST artifacts/complete/       ArtifactComplete -> {"stored": true, "name", "sha256", "size"} (the server
                                 read the object back and found the reported size and sha256)
Every report carries the attempt id and its number (the fencing token): 409 means the attempt is
stale or its run is finished, and the agent must stop sending for it and kill it.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

# 2: stop_kind "max_runtime", "resumed_from_step" on started events, POST checkpoints/deleted/,
#    heartbeat "offline".
# 3: one process per device: world_size counts processes (nnodes x local_world_size), "launch",
#    POST rendezvous/ (the port is rank 0's to choose), "ranks" and "failed_rank" on exits.
# 4: log chunks of stream "agent": the agent's note of output it dropped from a flooding job.
# 5: checkpoints go to and come from the object store directly: an upload plan in the answer to
#    POST checkpoints/, POST checkpoints/<id>/complete/, GET checkpoints/<id>/download/ and
#    GET snapshots/<sha256>/download/ (the old file/ paths still work for older agents).
PROTOCOL_VERSION = 5
DIRECT_UPLOAD_PROTOCOL = 5
AGENT_VERSION = "0.1.0"
API_PREFIX = "/api/v1/agent/"
MAX_CLAIM_WAIT_S = 25
MAX_METRIC_POINTS = 10_000
MAX_LOG_CHUNK_BYTES = 64 * 1024
MAX_LOG_CHUNKS = 200
# The server refuses a request body over this many bytes (Django's DATA_UPLOAD_MAX_MEMORY_SIZE,
# its default stated here): the agent keeps every JSON body under it (tests/agents/test_log_flood.py).
MAX_BODY_BYTES = 2_621_440
# "agent": a line the agent wrote itself (how much of a rank's stdout or stderr it dropped).
LOG_STREAMS = ("stdout", "stderr", "agent")
MAX_ENERGY_SAMPLES = 1000

# "max_runtime" is the agent's own: the job ran past its run's max_runtime_s.
StopKindName = Literal["cancel", "preempt", "drain", "abort", "max_runtime"]
EventName = Literal["started", "exited", "failed_to_start"]


class DeviceInfo(TypedDict):
    index: int
    kind: Literal["gpu", "cpu"]
    uuid: str
    model: str
    memory_bytes: int
    # A GPU with a fatal fault at registration (see DeviceSample); older agents leave these out.
    healthy: NotRequired[bool]
    health_reason: NotRequired[str]


class RunningAttempt(TypedDict):
    attempt_id: int
    number: int
    node_rank: int


class RegisterRequest(TypedDict):
    protocol_version: int
    agent_version: str
    agent_uid: str
    join_token: str
    pool: str
    hostname: str
    name: str
    address: str
    cpus: int
    memory_bytes: int
    devices: list[DeviceInfo]
    running: list[RunningAttempt]


class RegisterResponse(TypedDict):
    node_id: int
    credential: str  # empty when the agent re-registered with its stored credential
    session: int
    heartbeat_interval_s: float
    kill: list[int]
    pool: NotRequired[str]  # the pool the node is in (servers before it was added leave it out)


class DeviceSample(TypedDict):
    index: int
    utilization: float | None
    power_w: float | None
    # GPU health from NVML, read for every heartbeat (older agents and CPU slots leave it out).
    # healthy False: a fatal fault (uncorrectable ECC errors, pages or rows waiting for a reset,
    # failed row remapping, a lost GPU); nothing new is placed on the device and its runs requeue.
    healthy: NotRequired[bool]
    health_reason: NotRequired[str]  # plain words; "" when healthy
    memory_used_bytes: NotRequired[int | None]
    ecc_uncorrected: NotRequired[int | None]  # volatile uncorrectable ECC errors; None: not supported
    throttle: NotRequired[list[str] | None]  # why clocks are held down, in words ("hardware slowdown")


class HeartbeatRequest(TypedDict):
    session: int
    draining: bool
    devices: list[DeviceSample]
    running: list[RunningAttempt]
    # The agent's last word on a clean exit: the node is offline (not lost) until it registers again.
    offline: NotRequired[bool]


class StopOrder(TypedDict):
    attempt_id: int
    kind: StopKindName
    grace_period_s: int


class HeartbeatResponse(TypedDict):
    stop: list[StopOrder]
    kill: list[int]
    drain: bool


class ClaimRequest(TypedDict):
    session: int
    wait_s: float
    free_devices: list[int]


class CheckpointRef(TypedDict):
    id: int
    run_id: int
    step: int
    file: str
    size: int
    sha256: str


class SnapshotRef(TypedDict):
    """User code for the custom template: a content-addressed .tar.gz the agent unpacks."""

    sha256: str
    size: int


LaunchName = Literal["per_device", "per_node"]


class ImageRef(TypedDict):
    name: str
    digest: str  # sha256:...: the registry's manifest digest or the local image id


class AssignmentSpec(TypedDict):
    assignment_id: int
    attempt_id: int
    number: int
    run_id: int
    node_rank: int
    # Processes in the whole gang: nnodes x local_world_size.
    world_size: int
    nnodes: int
    # Processes on this node: one per device ("per_device"), or one ("per_node": code that spawns its own).
    local_world_size: int
    launch: LaunchName
    devices: list[int]
    device_kind: str
    entrypoint: str
    params: dict[str, object]
    checkpoint_policy: dict[str, int]
    grace_period_s: int
    max_runtime_s: int
    master_addr: str
    master_port: int  # a hint: rank 0's agent binds it if free, else any free port, and reports it
    resume_checkpoint: CheckpointRef | None
    init_checkpoint: CheckpointRef | None
    # Numbers of this run's earlier attempts that were declared lost (their late reports refused).
    lost_attempts: NotRequired[list[int]]
    # Project secrets the job gets as environment variables (apps.vault), only over this
    # authenticated channel; the agent keeps them in memory and redacts them from job output.
    secrets: NotRequired[dict[str, str]]
    code_snapshot: NotRequired[SnapshotRef | None]
    # The run's team (its project's): an agent without per-job users runs one team's jobs only.
    team: NotRequired[str]
    # Limits of this node's share, enforced with a cgroup when the agent is root: memory in bytes
    # and CPU cores (a fraction is a quota). Absent: the agent's --job-memory-limit, no CPU quota.
    memory_bytes: NotRequired[int]
    cpus: NotRequired[float]
    # The template's approved container image: an agent in container mode (--isolation docker)
    # runs the job in it, and refuses a job without one.
    image: NotRequired[ImageRef | None]


class ClaimResponse(TypedDict):
    assignments: list[AssignmentSpec]
    drain: NotRequired[bool]  # the node is draining (or otherwise not ready): no work until it is ready


class AttemptEvent(TypedDict):
    attempt_id: int
    number: int
    node_rank: int
    event: EventName
    exit_code: NotRequired[int | None]
    signal: NotRequired[int | None]
    # What the agent itself asked of the job before it exited (SIGTERM for cancel/preempt/drain).
    stop_kind: NotRequired[StopKindName | None]
    message: NotRequired[str]
    log_tail: NotRequired[str]
    # On "started" of attempt N>1: the step of the newest whole checkpoint the job finds on disk.
    resumed_from_step: NotRequired[int | None]
    # On "exited": every local process's exit, and the global rank that failed first (exit_code,
    # signal and log_tail are that rank's).
    ranks: NotRequired[list[RankExit]]
    failed_rank: NotRequired[int | None]
    time: float


class RankExit(TypedDict):
    rank: int
    local_rank: int
    exit_code: int | None
    signal: int | None
    seconds: float


class RendezvousReport(TypedDict):
    attempt_id: int
    number: int
    node_rank: int
    master_port: NotRequired[int]  # rank 0 only: the port it bound


class RendezvousInfo(TypedDict):
    master_addr: str
    master_port: int | None  # None until rank 0 has reported


class LogChunkMsg(TypedDict):
    rank: int
    seq: int
    stream: str  # one of LOG_STREAMS
    text: str


class LogBatch(TypedDict):
    attempt_id: int
    number: int
    chunks: list[LogChunkMsg]


class EnergySampleMsg(TypedDict):
    device_index: int
    at: float
    power_w: float | None
    energy_j: float
    utilization: float | None
    estimated: bool


class EnergyBatch(TypedDict):
    attempt_id: int
    number: int
    samples: list[EnergySampleMsg]


class ProgressReport(TypedDict):
    attempt_id: int
    number: int
    total_steps: NotRequired[int | None]
    steps_done: NotRequired[int | None]
    lineage: NotRequired[dict[str, object]]


class CheckpointReport(TypedDict):
    attempt_id: int
    number: int
    step: int
    file: str
    size: int
    sha256: str
    metrics: dict[str, object]


class UploadPart(TypedDict):
    number: int  # 1-based
    url: str
    offset: int  # of the part's first byte in the file
    size: int


class UploadPlan(TypedDict):
    """PUT each part's bytes to its URL (keep each answer's ETag header), then complete.
    upload_id "" is a single PUT."""

    upload_id: str
    size: int
    parts: list[UploadPart]


class CompletedPart(TypedDict):
    number: int
    etag: str


class CheckpointComplete(TypedDict):
    upload_id: str
    parts: list[CompletedPart]


class ArtifactReport(TypedDict):
    attempt_id: int
    number: int
    name: str  # relative path inside the run, such as plots/loss.png
    size: int
    sha256: str


class ArtifactPlan(TypedDict):
    upload: UploadPlan
    token: str  # signed by the server: names the run, the object and what it must hold


class ArtifactComplete(TypedDict):
    attempt_id: int
    number: int
    token: str
    parts: list[CompletedPart]


class DownloadLink(TypedDict):
    url: str
    size: int
    sha256: str


class CheckpointDeleted(TypedDict):
    attempt_id: int
    number: int
    step: int
    file: str


class MetricBatch(TypedDict):
    attempt_id: int
    attempt: int
    points: list[list[object]]  # [key, step, value, wall_time]


class LineageReport(TypedDict):
    """The environment one node ran an attempt in (agents/lineage.py), written once."""

    attempt_id: int
    number: int
    node_rank: int
    environment: dict[str, object]
    packages: list[str]  # "name==version", sorted
    packages_sha256: str  # of the packages joined with newlines: the server stores each distinct set once
