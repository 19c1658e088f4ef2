"""Launches each assignment in its own process group and supervises it.

Stopping (cancel, preempt, drain, max runtime) sends SIGTERM to the group and to every descendant seen (a
child that called setsid leaves the group but not our records), then SIGKILL after the grace
period. Each job gets PR_SET_PDEATHSIG, so it dies with the agent; the agent also records every
job's process group under <workdir>/jobs/ and kills leftovers on start (a job that outlived a
kill -9 of its agent must not keep writing into a run that has moved on).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.snapshot import snapshot_unpack

from agents import container, isolation, lineage, protocol
from agents.client import ApiError, Client, Unreachable
from agents.config import Config
from agents.devices import memory_bytes
from agents.launch import Plan
from agents.redact import Redactor
from agents.shipper import Shipper, Tail

log = logging.getLogger("agents.runner")
LOG_TAIL_LINES = 20
# What of the agent's own environment a job gets: what training needs (paths, locale, the
# CUDA/NCCL/threading knobs). Nothing else: the agent's join token, and under make run the
# server's database URL and vault key, are in the agent's environment.
PASSED_ENV = re.compile(
    r"(PATH|HOME|LANG|LANGUAGE|TZ|TMPDIR|TERM|USER|LOGNAME|SHELL|VIRTUAL_ENV|LD_LIBRARY_PATH|LD_PRELOAD|SSL_CERT_\w+|"
    r"REQUESTS_CA_BUNDLE|LC_\w+|CUDA_\w+|NVIDIA_\w+|NCCL_\w+|GLOO_\w+|TORCH\w*|OMP_\w+|MKL_\w+|OPENBLAS_\w+|KMP_\w+|"
    r"HF_\w+|TRANSFORMERS_\w+|PYTHON(?!PATH\b)\w+|PIP_\w+|XDG_\w+)\Z")
# How long a rank >0 node waits for rank 0's agent to report the rendezvous port.
RENDEZVOUS_WAIT_S = 300.0


def _signal_pids(pgid: int, pids: set[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone
    for pid in pids:
        try:
            # Only those that left the group: a second SIGTERM reran a job's checkpoint handler,
            # or killed it outright once Python's exit had restored the default action.
            if os.getpgid(pid) != pgid:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


@dataclass
class Job:
    spec: protocol.AssignmentSpec
    proc: Any
    root: Path
    started: float
    stop_kind: str | None = None
    kill_at: float | None = None
    tree: set[int] = field(default_factory=set)  # descendants seen by the monitor (may have left the group)
    cpu_s: float = 0.0
    # CPU seconds of the job and its reaped children, from wait4 at exit (for the last energy interval).
    exit_cpu_s: float | None = None
    user: isolation.JobUser | None = None  # the attempt's own Unix user (--isolation users)
    cgroup: isolation.Cgroup | None = None  # its memory and CPU limits (the agent is root)
    container: container.Container | None = None  # --isolation docker: the container it runs in

    @property
    def attempt_id(self) -> int:
        return self.spec["attempt_id"]


def _event_base(spec: protocol.AssignmentSpec) -> dict[str, int]:
    """What every event about this node's share of an attempt starts with."""
    return {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": spec["node_rank"]}


@dataclass
class _Start:
    """What starting an attempt has made so far: on a failure, what there is to release."""

    plan: Plan | None = None
    proc: subprocess.Popen[bytes] | None = None
    cgroup: isolation.Cgroup | None = None
    box: container.Container | None = None


class Runner:
    def __init__(self, config: Config, client: Client, shipper: Shipper) -> None:
        self.config = config
        self.client = client
        self.shipper = shipper
        self.jobs: dict[int, Job] = {}
        self.preparing: dict[int, protocol.AssignmentSpec] = {}
        self.ready: queue.Queue[tuple[protocol.AssignmentSpec, dict[str, str]]] = queue.Queue()
        self.lock = threading.RLock()
        # Called (main thread) when a job has exited, before its "exited" event is queued.
        self.on_exit: Callable[[Job], None] | None = None
        # The node's devices (index -> UUID for GPUs), for CUDA_VISIBLE_DEVICES by UUID.
        self.inventory: Callable[[], list[protocol.DeviceInfo]] = list
        # (GPU driver, CUDA driver) versions for lineage; empty without NVML.
        self.drivers: Callable[[], tuple[str, str]] = lambda: ("", "")
        config.jobs_dir.mkdir(parents=True, exist_ok=True)
        # Container mode as root: a Unix user per attempt as well, the container's --user.
        self.docker = container.Docker(config.container) if config.isolation == "docker" else None
        self.isolated = config.isolation == "users" or (self.docker is not None and os.geteuid() == 0)
        self.images: dict[int, container.Image] = {}  # resolved while preparing, until the job starts
        self.user_prefix = f"ty-{isolation.agent_tag(config.workdir)}-"
        self.job_users: dict[int, isolation.JobUser] = {}  # made while preparing, until the job starts
        self.cgroups: isolation.Cgroups | None = None
        if os.geteuid() == 0:
            try:
                self.cgroups = isolation.Cgroups.detect(isolation.agent_tag(config.workdir))
            except OSError as err:
                log.error("cannot set up cgroups (%s): jobs' memory and CPU are not limited", err)
            else:
                if self.cgroups is None:
                    log.warning("no cgroup memory controller (v2 or v1) here: jobs' memory and CPU are not limited")
        if self.isolated:
            self._secure_workdir()

    def _secure_workdir(self) -> None:
        """Jobs may pass through the workdir to their own run directory (0711), and see nothing else."""
        config = self.config
        config.runs_dir.mkdir(parents=True, exist_ok=True)
        for path, mode in ((config.workdir, 0o711), (config.runs_dir, 0o711), (config.jobs_dir, 0o700),
                           (config.spool_dir, 0o700), (config.workdir / "credential", 0o600), (config.workdir / "agent.json", 0o600)):
            if path.exists():
                os.chown(path, 0, 0)
                os.chmod(path, mode)

    # --- startup ----------------------------------------------------------------------
    def kill_leftovers(self) -> None:
        for record in self.config.jobs_dir.glob("*.json"):
            try:
                data = json.loads(record.read_text())
                pgid, pids = int(data["pgid"]), {int(p) for p in data.get("tree", [])}
            except (OSError, ValueError, KeyError) as err:
                log.error("unreadable job record %s: %s", record, err)
                record.unlink(missing_ok=True)
                continue
            log.warning("killing process group %d left by a previous agent (attempt %s)", pgid, record.stem)
            _signal_pids(pgid, pids, signal.SIGKILL)
            record.unlink(missing_ok=True)
        if self.docker is not None:
            for name in self.docker.leftovers(self.user_prefix):
                log.warning("removing container %s left by a previous agent", name)
                self.docker.remove(name)
        if self.cgroups is not None:
            for cgroup in self.cgroups.leftovers():
                log.warning("removing cgroup %s left by a previous agent", cgroup.dirs[0])
                cgroup.remove()
        if self.isolated:
            for name in isolation.users_leftover(self.user_prefix):
                log.warning("removing job user %s left by a previous agent", name)
                isolation.user_remove(name)

    # --- capacity ---------------------------------------------------------------------
    def used_devices(self) -> set[int]:
        with self.lock:
            specs = [j.spec for j in self.jobs.values()] + list(self.preparing.values())
        return {d for s in specs for d in s["devices"]}

    def running(self) -> list[protocol.RunningAttempt]:
        with self.lock:
            specs = [j.spec for j in self.jobs.values()] + list(self.preparing.values())
        return [{"attempt_id": s["attempt_id"], "number": s["number"], "node_rank": s["node_rank"]} for s in specs]

    def busy(self) -> bool:
        with self.lock:
            return bool(self.jobs or self.preparing)

    # --- launching --------------------------------------------------------------------
    def submit(self, spec: protocol.AssignmentSpec) -> None:
        """Prepare in a thread (downloads may take a while); the main thread then spawns."""
        with self.lock:
            if spec["attempt_id"] in self.jobs or spec["attempt_id"] in self.preparing:
                return
            self.preparing[spec["attempt_id"]] = spec
        threading.Thread(target=self._prepare, args=(spec,), name=f"prepare-{spec['attempt_id']}", daemon=True).start()

    def _paths(self, spec: protocol.AssignmentSpec) -> tuple[Path, Path, Path]:
        root = self.config.runs_dir / str(spec["run_id"]) / f"a{spec['number']}-r{spec['node_rank']}"
        return root, root / "job", self.config.runs_dir / str(spec["run_id"]) / "checkpoints"

    def _refusal(self, spec: protocol.AssignmentSpec) -> str:
        """Why this agent will not run the job ("" when it will): without per-job users or
        containers, one team per node; in container mode, a job without an approved image."""
        if self.docker is not None:
            if not spec.get("image"):
                return ("this node runs jobs in containers only (--isolation docker), and this run's template names no approved "
                        "image: an admin sets one on a new version of the template")
            return ""
        if self.isolated or self.config.single_tenant:
            return ""
        return isolation.tenant_admit(self.config.workdir / "tenant", spec.get("team"))

    def _prepare(self, spec: protocol.AssignmentSpec) -> None:
        root, run_dir, ckpt_dir = self._paths(spec)
        env: dict[str, str] = {}
        refusal = self._refusal(spec)
        if refusal:
            log.error("attempt %d: refused: %s", spec["attempt_id"], refusal)
            self.ready.put((spec, {"__error__": refusal}))
            return
        try:
            if self.isolated:  # an earlier attempt's user owned these: nothing it left may redirect our writes
                for d in (ckpt_dir, root.parent / "init"):
                    isolation.reclaim(d)
            for d in (run_dir, root / "agent", ckpt_dir):
                d.mkdir(parents=True, exist_ok=True)
            resume = spec.get("resume_checkpoint")
            if spec["number"] > 1 and spec.get("lost_attempts"):
                dropped = checkpoints_forget_lost(ckpt_dir, lost=set(spec.get("lost_attempts") or []),
                                                  after_step=resume["step"] if resume else -1)
                if dropped:
                    log.info("attempt %d: not resuming from %d checkpoint(s) a lost attempt wrote past the server's: %s",
                             spec["attempt_id"], len(dropped), ", ".join(dropped))
            if resume:
                self._ensure_checkpoint(resume, ckpt_dir, spec["number"])
            init = spec.get("init_checkpoint")
            if init:
                init_dir = self.config.runs_dir / str(spec["run_id"]) / "init"
                init_dir.mkdir(parents=True, exist_ok=True)
                path = self._fetch(init, init_dir)
                env["TRAINYARD_INIT_CHECKPOINT"] = str(path)
            snapshot = spec.get("code_snapshot")
            if snapshot:
                self._unpack_snapshot(snapshot, root, run_dir)
            env["MASTER_ADDR"], port = self._rendezvous(spec)
            env["MASTER_PORT"] = str(port)
            if self.isolated:
                self._hand_over(spec, root, run_dir, ckpt_dir)
            if self.docker is not None and spec.get("image"):
                image = self.docker.image_resolve(spec["image"])  # type: ignore[arg-type]
                with self.lock:
                    self.images[spec["attempt_id"]] = image
        except container.ContainerError as err:
            log.error("attempt %d: %s", spec["attempt_id"], err)
            env["__error__"] = str(err)
        except (ApiError, Unreachable, OSError, ValueError) as err:
            log.error("attempt %d: preparing failed: %s", spec["attempt_id"], err)
            env["__error__"] = f"preparing the run directory failed: {err}"
        job_env = {**self._env(spec, run_dir, ckpt_dir), **env}
        in_container = self._lineage_container(spec)
        if self.docker is not None and in_container is None:
            self.ready.put((spec, env))  # it will not start: no lineage to record
            return
        python = self.config.container.python if in_container is not None else lineage.interpreter(spec["entrypoint"])
        devices = self.inventory()
        if devices:
            gpu_driver, cuda_driver = self.drivers()
            lineage.report(self.shipper, python=python, env=job_env, spec=spec, devices=devices,
                           gpu_driver=gpu_driver, cuda_driver=cuda_driver, container=in_container)
        else:  # a runner without the agent's inventory (tests): lineage finds the node's devices itself
            lineage.report_on_node(self.shipper, spec=spec, env=job_env, slots=self.config.slots, container=in_container)
        self.ready.put((spec, env))

    def _gpu_uuids(self, spec: protocol.AssignmentSpec) -> tuple[str, ...]:
        """The attempt's GPUs by UUID (by index where the inventory has none), for `docker run --gpus`."""
        if spec.get("device_kind") != "gpu":
            return ()
        uuids = {d["index"]: d["uuid"] for d in self.inventory()}
        return tuple(uuids.get(int(d)) or str(d) for d in spec["devices"])

    def _container_user(self, spec: protocol.AssignmentSpec) -> tuple[int, int]:
        """The container's --user: the attempt's own user (agent as root), else the agent's (never root)."""
        with self.lock:
            user = self.job_users.get(spec["attempt_id"])
        if user is not None:
            return user.uid, user.gid
        return (os.getuid() or 65534, os.getgid() or 65534)

    def _lineage_container(self, spec: protocol.AssignmentSpec) -> lineage.Container | None:
        """In container mode: the image and runtime for the lineage, and the probe run in that image."""
        with self.lock:
            image = self.images.get(spec["attempt_id"])
        if self.docker is None or image is None:
            return None
        docker, user, gpus = self.docker, self._container_user(spec), self._gpu_uuids(spec)
        readable = container.readable_mounts(self.config.repo_root, self.config.container)
        name = f"{self.user_prefix}a{spec['attempt_id']}-r{spec['node_rank']}-lineage"

        def wrap(env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
            return container.probe_argv(docker, name=name, image=image, user=user, readable=readable, env=env, gpus=gpus)

        record = {**image.lineage(), "runtime": "docker", "network": docker.settings.network, "user": f"{user[0]}:{user[1]}",
                  "nvidia_runtime": spec.get("device_kind") == "gpu" and docker.nvidia()}
        return lineage.Container(record=record, wrap=wrap)

    def _hand_over(self, spec: protocol.AssignmentSpec, root: Path, run_dir: Path, ckpt_dir: Path) -> None:
        """The attempt's own user, and its directories made its own: the run directory, the run's
        checkpoints (a resumed attempt's new user takes them over), its temporary folder. The
        agent's folder of the attempt (plan, logs) it may read, not write."""
        user = isolation.user_create(f"{self.user_prefix}a{spec['attempt_id']}")
        with self.lock:
            self.job_users[spec["attempt_id"]] = user
        os.chmod(root.parent, 0o711)
        isolation.shared_with(root, user)
        isolation.shared_with(root / "agent", user)
        (root / "tmp").mkdir(exist_ok=True)
        for d in (run_dir, ckpt_dir, root / "tmp", root.parent / "init"):
            if d.is_dir():
                isolation.own(d, user)

    def _release(self, spec: protocol.AssignmentSpec, user: isolation.JobUser | None, cgroup: isolation.Cgroup | None,
                 box: container.Container | None = None) -> None:
        """After the attempt: whatever is left of it is killed, its container, cgroup and user
        removed, and its files given back to root (a later user with the same uid must not inherit them)."""
        with self.lock:
            self.images.pop(spec["attempt_id"], None)
        if box is not None:
            box.remove()
        if cgroup is not None:
            cgroup.remove()
        if user is None:
            return
        root, _, ckpt_dir = self._paths(spec)
        isolation.user_remove(user.name)
        for d in (root, ckpt_dir, root.parent / "init"):
            try:
                isolation.reclaim(d)
            except OSError as err:
                log.error("attempt %d: cannot give %s back to root: %s", spec["attempt_id"], d, err)

    def _memory_limit(self, spec: protocol.AssignmentSpec) -> int:
        """The server's figure for this node's share, else --job-memory-limit per device (by default
        the node's memory divided by its devices); 0: none."""
        if spec.get("memory_bytes"):
            return int(spec["memory_bytes"])
        per_device = self.config.job_memory_per_device
        if per_device is None:
            per_device = memory_bytes() // max(1, len(self.inventory()) or self.config.slots)
        return per_device * max(1, len(spec["devices"]))

    def _rendezvous(self, spec: protocol.AssignmentSpec) -> tuple[str, int]:
        """(MASTER_ADDR, MASTER_PORT): rank 0's agent binds a free port (the server's hint first)
        and reports it; the other nodes' agents wait for it from the server."""
        body: protocol.RendezvousReport = {"attempt_id": spec["attempt_id"], "number": spec["number"],
                                           "node_rank": spec["node_rank"]}
        path = protocol.API_PREFIX + "rendezvous/"
        if spec["node_rank"] == 0:
            port = free_port(spec["master_port"])
            if port != spec["master_port"]:
                log.info("attempt %d: port %d is taken; rendezvous on %d", spec["attempt_id"], spec["master_port"], port)
            body["master_port"] = port
            addr = spec["master_addr"] or "127.0.0.1"
            if spec.get("nnodes", 1) <= 1:
                # Nobody waits on it: an outage must not keep a one-node job from starting.
                self.shipper.rendezvous(body)
                return "127.0.0.1", port
            info: protocol.RendezvousInfo = self.client.request("POST", path, body, retry_for=60.0)
            return info["master_addr"] or addr, port
        deadline = time.monotonic() + RENDEZVOUS_WAIT_S
        while True:
            info = self.client.request("POST", path, body, retry_for=30.0)
            if info.get("master_port"):
                return info["master_addr"] or "127.0.0.1", int(info["master_port"])  # type: ignore[arg-type]
            if time.monotonic() >= deadline:
                raise ValueError(f"rank 0's node did not report its rendezvous port within {RENDEZVOUS_WAIT_S:.0f} s")
            time.sleep(0.5)

    def _fetch(self, ref: protocol.CheckpointRef, directory: Path) -> Path:
        dest = directory / ref["file"]
        if not (dest.exists() and dest.stat().st_size == ref["size"] and _sha256(dest) == ref["sha256"]):
            log.info("downloading checkpoint %d (step %d) of run %d", ref["id"], ref["step"], ref["run_id"])
            self._download(f"{protocol.API_PREFIX}checkpoints/{ref['id']}", dest, legacy="file/")
            if _sha256(dest) != ref["sha256"]:
                dest.unlink(missing_ok=True)
                raise ValueError(f"checkpoint {ref['id']} downloaded with a wrong sha256")
        return dest

    def _unpack_snapshot(self, ref: protocol.SnapshotRef, root: Path, run_dir: Path) -> None:
        """Custom code: fetch the run's snapshot and unpack it into the job's directory.

        The server already refused unsafe archives at upload; unpacking checks again (paths,
        links, sizes, sha256) because the agent must not trust bytes it merely downloaded.
        """
        archive = root / "agent" / f"snapshot-{ref['sha256'][:16]}.tar.gz"
        if not archive.exists():
            log.info("downloading code snapshot %s (%d bytes)", ref["sha256"][:12], ref["size"])
            self._download(f"{protocol.API_PREFIX}snapshots/{ref['sha256']}", archive, legacy="")
        snapshot_unpack(archive, run_dir, expected_sha256=ref["sha256"])

    def _download(self, base: str, dest: Path, *, legacy: str) -> None:
        """From the object store by a fresh presigned URL; from the web itself (base + legacy)
        when the server predates them (protocol < 5: no download/ path, a 404)."""
        try:
            link: protocol.DownloadLink = self.client.request("GET", f"{base}/download/", retry_for=60.0)
        except ApiError as err:
            if err.status != 404:
                raise
            self.client.download(f"{base}/{legacy}", dest)
            return
        self.client.fetch(link["url"], dest)

    def _ensure_checkpoint(self, ref: protocol.CheckpointRef, ckpt_dir: Path, number: int) -> None:
        """Attempt N>1 on a node without the run's latest checkpoint: fetch it and record it."""
        dest = ckpt_dir / ref["file"]
        if dest.exists() and dest.stat().st_size == ref["size"] and _sha256(dest) == ref["sha256"]:
            return
        self._fetch(ref, ckpt_dir)
        record = {"step": ref["step"], "file": ref["file"], "size": ref["size"], "sha256": ref["sha256"], "metrics": {},
                  "time": time.time(), "attempt": number - 1}
        with open(ckpt_dir / "checkpoints.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def launch_ready(self) -> None:
        """Main thread only: PR_SET_PDEATHSIG is tied to the thread that forks."""
        while True:
            try:
                spec, extra = self.ready.get_nowait()
            except queue.Empty:
                return
            self._spawn(spec, extra)

    def _env(self, spec: protocol.AssignmentSpec, run_dir: Path, ckpt_dir: Path) -> dict[str, str]:
        """The job's environment, less what differs per process (agents.launch.rank_env adds it)."""
        policy = spec.get("checkpoint_policy") or {}
        repo = str(self.config.repo_root)
        pythonpath = os.pathsep.join(p for p in [repo, str(self.config.repo_root / "sdk"), os.environ.get("PYTHONPATH", "")] if p)
        env = {
            **{k: v for k, v in os.environ.items() if PASSED_ENV.match(k)}, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1",
            "TRAINYARD_RUN_ID": str(spec["run_id"]), "TRAINYARD_ATTEMPT": str(spec["number"]),
            "TRAINYARD_RUN_DIR": str(run_dir), "TRAINYARD_CHECKPOINT_DIR": str(ckpt_dir),
            "TRAINYARD_PARAMS": json.dumps(spec.get("params") or {}),
            "TRAINYARD_CHECKPOINT_EVERY_STEPS": str(int(policy.get("every_steps", 0) or 0)),
            "TRAINYARD_CHECKPOINT_EVERY_SECONDS": str(int(policy.get("every_seconds", 0) or 0)),
            "TRAINYARD_CHECKPOINT_KEEP": str(int(policy.get("keep_last", 0) or 0)),
            "TRAINYARD_CHECKPOINT_KEEP_BEST": str(policy.get("keep_best") or ""),
            "MASTER_ADDR": spec["master_addr"] or "127.0.0.1", "MASTER_PORT": str(spec["master_port"]),
        }
        for name in ("TRAINYARD_INIT_CHECKPOINT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                     "CUDA_VISIBLE_DEVICES"):
            env.pop(name, None)
        return env

    def launch_plan(self, spec: protocol.AssignmentSpec, argv: list[str], run_dir: Path, log_dir: Path) -> Plan:
        """One process per device (or one per node), each seeing only its own GPU, named by UUID
        so that CUDA's numbering and NVML's can never disagree."""
        per_node = spec.get("launch") == "per_node"
        devices = [int(d) for d in spec["devices"]]
        if spec.get("device_kind") == "gpu":
            uuids = {d["index"]: d["uuid"] for d in self.inventory()}
            visible = [uuids.get(d) or str(d) for d in devices]
        else:
            visible = ["" for _ in devices]
        slots = [",".join(visible)] if per_node else visible
        local_world = max(1, len(slots))
        nnodes = int(spec.get("nnodes") or 1)
        return {"argv": argv, "cwd": str(run_dir), "log_dir": str(log_dir), "node_rank": spec["node_rank"], "nnodes": nnodes,
                "local_world_size": local_world, "world_size": nnodes * local_world, "visible_devices": slots or [""],
                "grace_period_s": float(spec["grace_period_s"]), "secret_names": sorted(spec.get("secrets") or {})}

    def _spawn(self, spec: protocol.AssignmentSpec, extra: dict[str, str]) -> None:
        root = self._paths(spec)[0]
        error = extra.pop("__error__", "")
        with self.lock:
            user = self.job_users.pop(spec["attempt_id"], None)
        start = _Start()
        if not error:
            error = self._start_launcher(spec, extra, user, start)
        with self.lock:
            self.preparing.pop(spec["attempt_id"], None)
            if start.proc is None or start.plan is None:
                log.error("attempt %d rank %d failed to start: %s", spec["attempt_id"], spec["node_rank"], error)
                self.shipper.event({**_event_base(spec), "event": "failed_to_start", "message": error, "time": time.time()})  # type: ignore[typeddict-item]
                self._release(spec, user, start.cgroup, start.box)
                return
            job = Job(spec=spec, proc=start.proc, root=root, started=time.monotonic(), user=user, cgroup=start.cgroup,
                      container=start.box)
            self.jobs[spec["attempt_id"]] = job
            self._record(job)
        self._announce(spec, start.plan, start.proc.pid)

    def _start_launcher(self, spec: protocol.AssignmentSpec, extra: dict[str, str], user: isolation.JobUser | None, start: _Start) -> str:
        """Writes the launcher's plan and starts it, keeping in `start` what it made (so a failure part
        way releases it). Returns why it could not start, or "" when it did."""
        root, run_dir, ckpt_dir = self._paths(spec)
        try:
            argv = self._job_argv(spec)
            env = self._job_env(spec, extra, user)
            log_dir = root / "agent"
            start.plan = self.launch_plan(spec, argv, run_dir, log_dir)
            plan_path = log_dir / "plan.json"
            plan_path.write_text(json.dumps(start.plan))
            self._job_files(spec, start.plan, log_dir, user)
            if self.docker is not None:
                start.box, start.proc = self._spawn_container(spec, plan_path, env, user)
            else:
                self._spawn_on_host(spec, plan_path, env, user, start)
        except container.ContainerError as exc:
            return str(exc)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return ""

    def _job_argv(self, spec: protocol.AssignmentSpec) -> list[str]:
        argv = shlex.split(spec["entrypoint"])
        if argv and argv[0] in ("python", "python3"):
            argv[0] = self.config.job_python  # the agent's interpreter by default: same venv, same torch
        if not argv:
            raise ValueError("the run's entrypoint is empty")
        return argv

    def _job_env(self, spec: protocol.AssignmentSpec, extra: dict[str, str], user: isolation.JobUser | None) -> dict[str, str]:
        root, run_dir, ckpt_dir = self._paths(spec)
        env = {**self._env(spec, run_dir, ckpt_dir), **extra}
        # Secret values live only in the job's environment (readable by its own uid alone); the
        # launcher redacts them from the ranks' output before it reaches the log files (and so the server).
        env.update(spec.get("secrets") or {})
        if user is not None:
            env.update({"HOME": str(run_dir), "USER": user.name, "LOGNAME": user.name, "TMPDIR": str(root / "tmp")})
        return env

    def _spawn_on_host(self, spec: protocol.AssignmentSpec, plan_path: Path, env: dict[str, str], user: isolation.JobUser | None,
                       start: _Start) -> None:
        """The launcher on this host, in its own session and the attempt's cgroup (when the agent makes them)."""
        root, run_dir, _ = self._paths(spec)
        if self.cgroups is not None:
            start.cgroup = self.cgroups.create(spec["attempt_id"], memory_bytes=self._memory_limit(spec),
                                               cpus=float(spec.get("cpus") or 0))
        with open(root / "agent" / "launcher.log", "ab") as out:
            start.proc = subprocess.Popen([self.config.job_python, "-m", "agents.launch", str(plan_path)], cwd=run_dir,
                                          env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=isolation.child_setup(start.cgroup, user), umask=0o077 if user else -1)

    def _announce(self, spec: protocol.AssignmentSpec, plan: Plan, pid: int) -> None:
        """A started attempt: logged, its output shipped from now on, and the server told."""
        root, run_dir, ckpt_dir = self._paths(spec)
        first = spec["node_rank"] * plan["local_world_size"]
        ranks = list(range(first, first + plan["local_world_size"]))
        log.info("attempt %d (run %d, node %d of %d) started as pid %d: ranks %s of %d: %s", spec["attempt_id"], spec["run_id"],
                 spec["node_rank"], plan["nnodes"], pid, ", ".join(map(str, ranks)), plan["world_size"], spec["entrypoint"])
        self.shipper.add(Tail(attempt_id=spec["attempt_id"], number=spec["number"], rank=spec["node_rank"], run_dir=run_dir,
                              checkpoint_dir=ckpt_dir, log_dir=root / "agent", state_path=root / "agent" / "ship-state.json",
                              redactor=Redactor(spec.get("secrets") or {}), ranks=ranks))
        started: protocol.AttemptEvent = {**_event_base(spec), "event": "started", "time": time.time()}  # type: ignore[typeddict-item]
        if spec["number"] > 1 and spec["node_rank"] == 0:
            started["resumed_from_step"] = resumable_step(ckpt_dir)
        self.shipper.event(started)

    def _spawn_container(self, spec: protocol.AssignmentSpec, plan_path: Path, env: dict[str, str],
                         user: isolation.JobUser | None) -> tuple[container.Container, subprocess.Popen[bytes]]:
        """The launcher in the attempt's container (the docker CLI in the foreground, in its own
        process group like a launcher would be): its folders, limits, GPUs, user and network only."""
        assert self.docker is not None
        root, run_dir, ckpt_dir = self._paths(spec)
        with self.lock:
            image = self.images.get(spec["attempt_id"])
        if image is None:
            raise container.ContainerError("the run's image was not resolved on this node")
        plan = json.loads(plan_path.read_text())
        plan["forward_term"] = True
        plan["argv"] = [self.config.container.python if i == 0 and a == self.config.job_python else a
                        for i, a in enumerate(plan["argv"])]
        plan_path.write_text(json.dumps(plan))
        gpus = self._gpu_uuids(spec)
        init_dir = root.parent / "init"
        # The host's HOME and TMPDIR mean nothing inside: the run directory is the job's home, and
        # the container's own /tmp its temporary folder (unless it has the attempt's, as its own user).
        env = {**env, "HOME": str(run_dir)}
        if not env.get("TMPDIR", "").startswith(f"{root}{os.sep}"):
            env.pop("TMPDIR", None)
        name = f"{self.user_prefix}a{spec['attempt_id']}-r{spec['node_rank']}"
        launch = container.Launch(
            name=name, image=image, user=(user.uid, user.gid) if user is not None else self._container_user(spec), workdir=run_dir,
            writable=(root, ckpt_dir) + ((init_dir,) if init_dir.is_dir() else ()),
            readable=container.readable_mounts(self.config.repo_root, self.config.container),
            env=env, command=(self.config.container.python, "-m", "agents.launch", str(plan_path)),
            memory_bytes=self._memory_limit(spec), cpus=float(spec.get("cpus") or 0), gpus=gpus)
        self.docker.remove(name)  # a leftover of an earlier try of this attempt would block the name
        argv, cli_env = container.run_argv(self.docker, launch)
        box = container.Container(name=name, memory_bytes=launch.memory_bytes, docker=self.docker)
        with open(root / "agent" / "launcher.log", "ab") as out:
            proc = subprocess.Popen(argv, cwd="/", env=cli_env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=isolation.child_setup(None, None))
        return box, proc

    def _job_files(self, spec: protocol.AssignmentSpec, plan: Plan, log_dir: Path, user: isolation.JobUser | None) -> None:
        """The launcher's result and the ranks' logs. With a job user: made for it beforehand, in the
        agent's folder that it may not write, so it cannot swap one for a link to a file of the agent's."""
        result = log_dir / "result.json"
        if user is None:
            result.unlink(missing_ok=True)
            return
        os.chown(log_dir / "plan.json", user.uid, user.gid)
        os.chmod(log_dir / "plan.json", 0o600)
        first = spec["node_rank"] * plan["local_world_size"]
        isolation.file_for(result, user)
        for rank in range(first, first + plan["local_world_size"]):
            for stream in ("stdout", "stderr"):
                path = log_dir / f"rank{rank}.{stream}.log"
                if path.is_file() and not path.is_symlink():
                    os.chown(path, user.uid, user.gid)
                else:
                    isolation.file_for(path, user)

    def _record(self, job: Job) -> None:
        path = self.config.jobs_dir / f"{job.attempt_id}.json"
        path.write_text(json.dumps({"pgid": job.proc.pid, "tree": sorted(job.tree), "run_id": job.spec["run_id"]}))

    # --- stopping ---------------------------------------------------------------------
    def request_stop(self, attempt_id: int, kind: str, grace_s: float) -> None:
        with self.lock:
            job = self.jobs.get(attempt_id)
            if job is None:
                return
            kill_at = time.monotonic() + max(0.0, grace_s)
            if job.stop_kind is not None:
                # Already stopping (its kind stays what the job was told); a shorter grace still counts.
                if job.kill_at is None or kill_at < job.kill_at:
                    job.kill_at = kill_at
                return
            job.stop_kind = kind
            job.kill_at = kill_at
            log.info("attempt %d: %s: SIGTERM, SIGKILL in %.0fs", attempt_id, kind, grace_s)
            _signal_pids(job.proc.pid, job.tree, signal.SIGTERM)

    def kill(self, attempt_id: int, reason: str) -> None:
        with self.lock:
            job = self.jobs.get(attempt_id)
            if job is None:
                return
            log.warning("attempt %d: killing (%s)", attempt_id, reason)
            job.stop_kind = job.stop_kind or "abort"
            job.kill_at = time.monotonic()
            _signal_pids(job.proc.pid, job.tree, signal.SIGKILL)

    def stop_all(self, kind: str, grace_s: float | None = None) -> None:
        with self.lock:
            jobs = list(self.jobs.values())
        for job in jobs:
            self.request_stop(job.attempt_id, kind, job.spec["grace_period_s"] if grace_s is None else grace_s)

    # --- supervision ------------------------------------------------------------------
    def poll(self) -> None:
        now = time.monotonic()
        with self.lock:
            jobs = list(self.jobs.values())
        for job in jobs:
            code = _reap(job)
            if code is None:
                limit = int(job.spec.get("max_runtime_s") or 0)
                if limit and job.stop_kind is None and now - job.started >= limit:
                    log.warning("attempt %d ran past its max runtime of %d s; stopping it", job.attempt_id, limit)
                    self.request_stop(job.attempt_id, "max_runtime", job.spec["grace_period_s"])
                if job.kill_at is not None and now >= job.kill_at:
                    _signal_pids(job.proc.pid, job.tree, signal.SIGKILL)
                continue
            self._exited(job, code)

    def _exited(self, job: Job, code: int) -> None:
        # Whatever the job left behind in its group or tree goes with it.
        _signal_pids(job.proc.pid, job.tree, signal.SIGKILL)
        with self.lock:
            self.jobs.pop(job.attempt_id, None)
        self.shipper.finish(job.attempt_id)
        if self.on_exit is not None:
            self.on_exit(job)  # the last energy sample goes out before the attempt ends on the server
        result = _launch_result(job.root / "agent" / "result.json")
        ranks: list[protocol.RankExit] = list(result.get("ranks") or [])
        failed = result.get("failed_rank")
        failed_exit = next((r for r in ranks if r["rank"] == failed), None)
        if failed_exit is None:
            # Stopped by us (no rank failed first): the first rank that did not exit cleanly, if any.
            failed_exit = next((r for r in ranks if r["exit_code"] != 0), ranks[0] if ranks else None)
        if failed_exit is not None:
            exit_code, sig = failed_exit["exit_code"], failed_exit["signal"]
        else:
            exit_code, sig = (code, None) if code >= 0 else (None, -code)  # the launcher itself (killed after grace)
        log.info("attempt %d exited: %s%s%s", job.attempt_id, f"code {exit_code}" if sig is None else f"signal {sig}",
                 f" (rank {failed} failed first)" if failed is not None else "", f" after {job.stop_kind}" if job.stop_kind else "")
        tail = self._log_tail(job, failed)
        limits = job.container or job.cgroup
        if limits is not None and limits.memory_bytes and limits.oom_kills():
            who = f"rank {failed}" if failed is not None else "a process of the job"
            line = f"trainyard agent: {who} {isolation.memory_limit_words(limits.memory_bytes)}"
            log.warning("attempt %d: %s", job.attempt_id, line)
            tail = f"{tail}\n{line}" if tail else line
        self.shipper.event({"attempt_id": job.attempt_id, "number": job.spec["number"], "node_rank": job.spec["node_rank"],
                            "event": "exited", "exit_code": exit_code, "signal": sig, "ranks": ranks, "failed_rank": failed,
                            "stop_kind": job.stop_kind, "log_tail": tail, "time": time.time()})  # type: ignore[typeddict-item]
        self._release(job.spec, job.user, job.cgroup, job.container)
        (self.config.jobs_dir / f"{job.attempt_id}.json").unlink(missing_ok=True)

    def _log_tail(self, job: Job, rank: int | None) -> str:
        """The last lines of the rank that failed first (every local rank's when none did)."""
        log_dir = job.root / "agent"
        if rank is not None:
            names = [f"rank{rank}.stdout.log", f"rank{rank}.stderr.log"]
        else:
            names = sorted(p.name for p in log_dir.glob("rank*.log")) + ["launcher.log"]
        lines: list[str] = []
        for name in names:
            try:
                with open(log_dir / name, "rb") as fh:
                    fh.seek(max(0, os.fstat(fh.fileno()).st_size - 8192))
                    lines += fh.read().decode("utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
            except FileNotFoundError:
                continue
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def update_tree(self, attempt_id: int, pids: set[int], cpu_s: float) -> None:
        with self.lock:
            job = self.jobs.get(attempt_id)
            if job is None:
                return
            new = pids - job.tree
            job.tree |= pids
            job.cpu_s = max(job.cpu_s, cpu_s)
            if new:
                self._record(job)
            if job.kill_at is not None and new:
                # A child born during the grace period still gets the stop signal.
                _signal_pids(job.proc.pid, new, signal.SIGTERM if time.monotonic() < job.kill_at else signal.SIGKILL)


def _launch_result(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # the launcher was killed before it could write one
    return data if isinstance(data, dict) else {}


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it, else a free port the kernel picks."""
    for candidate in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free TCP port for the rendezvous")


def _reap(job: Job) -> int | None:
    """Popen.poll, but through wait4 so the job's own CPU time (with its reaped children) is kept."""
    if job.proc.returncode is not None:
        return int(job.proc.returncode)
    try:
        pid, status, usage = os.wait4(job.proc.pid, os.WNOHANG)
    except ChildProcessError:
        return job.proc.poll()  # reaped elsewhere: Popen knows the code
    if pid == 0:
        return None
    job.exit_cpu_s = usage.ru_utime + usage.ru_stime
    job.proc.returncode = os.waitstatus_to_exitcode(status)
    return int(job.proc.returncode)


def checkpoints_forget_lost(ckpt_dir: Path, *, lost: set[int], after_step: int) -> list[str]:
    """Drop from the index (and delete) the checkpoints that a lost attempt wrote past `after_step`,
    the step of the server's newest stored checkpoint; returns the dropped file names.

    A lost attempt's job may go on training while its agent is silent, writing checkpoints here
    after the server has stopped taking its metrics. Resuming from one of those would skip the
    steps in between for good: their metrics were refused and the next attempt would not log
    them again. Resuming from the server's checkpoint re-logs them instead.
    """
    index = ckpt_dir / "checkpoints.jsonl"
    try:
        lines = index.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    kept: list[str] = []
    dropped: list[str] = []
    still_used: set[str] = set()
    for raw in lines:
        try:
            rec = json.loads(raw)
            stale = int(rec.get("attempt", 0)) in lost and int(rec["step"]) > after_step
        except (ValueError, KeyError, TypeError, AttributeError):
            kept.append(raw)  # torn lines are the SDK's to skip
            continue
        if stale:
            dropped.append(str(rec.get("file", "")))
        else:
            kept.append(raw)
            still_used.add(str(rec.get("file", "")))
    if not dropped:
        return []
    tmp = index.with_name(index.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in kept))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, index)
    for name in dropped:
        # Only plain file names in this folder: the index is the job's to write.
        if name and name == Path(name).name and name not in still_used:
            (ckpt_dir / name).unlink(missing_ok=True)
    return dropped


def resumable_step(ckpt_dir: Path) -> int | None:
    """The step the SDK's latest_checkpoint() will pick: the newest record whose file is there whole.

    Sizes stand in for the SDK's sha256 check, so a launch never waits on hashing large files.
    """
    try:
        lines = (ckpt_dir / "checkpoints.jsonl").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for raw in reversed(lines):
        try:
            rec = json.loads(raw)
            path = ckpt_dir / str(rec["file"])
            if isinstance(rec.get("step"), int) and path.is_file() and path.stat().st_size == rec.get("size"):
                return int(rec["step"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
