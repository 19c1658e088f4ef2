"""Agent settings: command-line flags, with environment variables (TRAINYARD_AGENT_*) as defaults."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agents.container import NETWORKS, Settings, mounts_parse


def _env(name: str, default: str) -> str:
    return os.environ.get(f"TRAINYARD_AGENT_{name}", default)


@dataclass(frozen=True)
class Config:
    server: str
    join_token: str
    pool: str
    workdir: Path
    slots: int
    name: str
    address: str
    heartbeat_s: float
    claim_wait_s: float
    drain_timeout_s: float
    ship_interval_s: float
    sample_interval_s: float
    energy_interval_s: float
    spool_max_bytes: int
    watts_per_core: float
    request_timeout_s: float
    repo_root: Path
    # "users": each attempt as its own Unix user (root only); "docker": in a container of its
    # template's approved image (and its own user when root); "none": as the agent's user.
    isolation: str = "none"
    # Without isolation, any team's jobs may run here (else one team's only).
    single_tenant: bool = False
    # Memory a job may use per device it holds, when the server does not say; None: the node's
    # memory divided by its devices; 0: no limit.
    job_memory_per_device: int | None = None
    # The interpreter for the launcher and `python` entrypoints: one the jobs' users can run.
    job_python: str = sys.executable
    # Container mode: the engine, the pool's network policy, the image's Python, read-only mounts.
    container: Settings = field(default_factory=Settings)

    @property
    def spool_dir(self) -> Path:
        return self.workdir / "spool"

    @property
    def jobs_dir(self) -> Path:
        return self.workdir / "jobs"

    @property
    def runs_dir(self) -> Path:
        return self.workdir / "runs"


def _outbound_address(server: str) -> str:
    """The local address other nodes can reach: the interface that routes to the server."""
    host = urlparse(server).hostname or "127.0.0.1"
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # UDP connect sends nothing; it only picks the route
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def parse_size(text: str) -> int | None:
    """Bytes from "200M", "2G", "1.5GiB", "512MiB" or a plain number (powers of 1024); None for "auto"."""
    if text.strip().lower() == "auto":
        return None
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.I)
    if not match:
        raise ValueError(f"not a size: {text!r} (like 200M, 2G, 0 or auto)")
    return int(float(match.group(1)) * 1024 ** "_kmgt".index(match.group(2).lower() or "_"))


EPILOG = """\
First start: an administrator makes a join token for the pool (the admin's Nodes > Join tokens,
or `python manage.py agent_join_token --pool NAME`), then on the node:

  python -m agents --server https://portal.example.com --join-token tyj_... --pool NAME

The agent keeps its identity and node credential in --workdir: later starts need no join token.
It retries with backoff while the server cannot be reached. SIGTERM or Ctrl-C drains (no new
work; running jobs get --drain-timeout seconds, then checkpoint and requeue); a second one
stops them at once. Every option can also be set with the environment variable named in its help.
"""


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(prog="python -m agents", description="Trainyard node agent: joins a node pool and runs the "
                                "training jobs the portal places on this machine.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)

    def opt(flag: str, env: str, default: str, text: str, *, secret: bool = False, **kwargs: Any) -> None:
        # The default shown is what this start would use (the environment's value, if set); a
        # join token from the environment is never echoed.
        shown = "" if secret or not _env(env, default) else "; default: %(default)s"
        p.add_argument(flag, default=_env(env, default), help=f"{text} (env TRAINYARD_AGENT_{env}{shown})", **kwargs)

    opt("--server", "SERVER", "http://127.0.0.1:8000", "the portal's base URL", metavar="URL")
    opt("--join-token", "JOIN_TOKEN", "", "the pool's join token; needed for the first registration only", metavar="TOKEN",
        secret=True)
    opt("--pool", "POOL", "local", "the node pool to join: the one the join token was made for", metavar="NAME")
    opt("--workdir", "WORKDIR", "var/agent", "where the agent keeps its identity, credential, job files and unsent reports",
        metavar="DIR")
    opt("--slots", "SLOTS", "1", "CPU slots offered when there is no GPU, 1 to 1024", type=int, metavar="N")
    opt("--name", "NAME", "", "hostname to report; this host's when empty", metavar="NAME")
    opt("--address", "ADDRESS", "", "address other ranks use to reach this node; when empty, the one that routes to the server",
        metavar="ADDR")
    opt("--heartbeat", "HEARTBEAT_S", "5", "seconds between heartbeats", type=float, metavar="SECONDS")
    opt("--claim-wait", "CLAIM_WAIT_S", "10", "seconds one claim for work waits on the server, at most 25", type=float,
        metavar="SECONDS")
    opt("--drain-timeout", "DRAIN_TIMEOUT_S", "60", "seconds running jobs may go on after SIGTERM before they are stopped",
        type=float, metavar="SECONDS")
    opt("--ship-interval", "SHIP_INTERVAL_S", "0.5", "seconds between shipments of metrics and logs", type=float,
        metavar="SECONDS")
    opt("--sample-interval", "SAMPLE_INTERVAL_S", "1", "seconds between device and process readings", type=float,
        metavar="SECONDS")
    opt("--energy-interval", "ENERGY_INTERVAL_S", "5", "seconds between energy reports", type=float, metavar="SECONDS")
    opt("--spool-max-mb", "SPOOL_MAX_MB", "512", "megabytes of unsent reports kept on disk while the server is away",
        type=float, metavar="MB")
    opt("--watts-per-core", "WATTS_PER_CORE", "10", "watts one busy CPU core is taken to draw where nothing measures it",
        type=float, metavar="WATTS")
    opt("--request-timeout", "REQUEST_TIMEOUT_S", "30", "seconds one request to the server may take", type=float,
        metavar="SECONDS")
    opt("--isolation", "ISOLATION", "auto", "how jobs are kept apart: users (a Unix user and private directories per job; "
        "needs root), docker (each job in a container of its template's approved image, through the Docker engine), none "
        "(jobs run as the agent's user), or auto (users when root)", choices=["auto", "users", "docker", "none"])
    opt("--docker-host", "DOCKER_HOST", "", "container mode: the Docker engine's address (like unix:///run/docker.sock); "
        "empty: the docker CLI's default", metavar="URL")
    opt("--container-network", "CONTAINER_NETWORK", "none", "container mode: the pool's network policy for jobs: none (no "
        "network at all; metrics still arrive through the run directory), host (multi-node jobs need it) or bridge",
        choices=list(NETWORKS))
    opt("--container-python", "CONTAINER_PYTHON", "python3", "container mode: the Python inside the images that runs the "
        "launcher and `python` entrypoints", metavar="PATH")
    opt("--container-mount", "CONTAINER_MOUNTS", "", "container mode: host folders every job's container gets read-only "
        "(a shared toolchain or dataset), comma-separated SRC or SRC:DST", metavar="MOUNTS")
    opt("--container-pythonpath", "CONTAINER_PYTHONPATH", "", "container mode: folders inside the container added to the "
        "jobs' PYTHONPATH (a mounted site-packages), comma-separated", metavar="DIRS")
    p.add_argument("--single-tenant", action="store_true", default=_env("SINGLE_TENANT", "").lower() in ("1", "true", "yes"),
                   help="without isolation, run any team's jobs here, accepting that they can read each other's secrets and "
                        "files and the node credential (else only the first team's) (env TRAINYARD_AGENT_SINGLE_TENANT=1)")
    opt("--job-memory-limit", "JOB_MEMORY_LIMIT", "auto", "memory a job may use per device it holds, enforced with a cgroup when "
        "the agent is root and the server does not say: like 512M or 4G; auto: the node's memory divided by its devices; "
        "0: no limit", metavar="SIZE")
    opt("--job-python", "JOB_PYTHON", sys.executable, "the Python that runs job launchers and `python` entrypoints; with "
        "per-job users it must be one any user can run", metavar="PATH")
    a = p.parse_args(argv)
    try:
        mounts = mounts_parse(a.container_mount)
    except ValueError as err:
        p.error(f"--container-mount: {err}")
    if a.isolation == "docker" and not shutil.which("docker"):
        p.error("--isolation docker needs the docker CLI on PATH (apt-get install docker.io)")
    try:
        job_memory = parse_size(a.job_memory_limit)
    except ValueError as err:
        p.error(f"--job-memory-limit: {err}")
    root = os.geteuid() == 0
    isolation = ("users" if root else "none") if a.isolation == "auto" else a.isolation
    if isolation == "users" and not root:
        p.error("--isolation users needs the agent to run as root (it makes a Unix user per job)")
    if a.slots < 1 or a.slots > 1024:
        p.error("--slots must be from 1 to 1024")
    if a.heartbeat <= 0 or a.drain_timeout < 0:
        p.error("--heartbeat must be > 0 and --drain-timeout >= 0")
    server = a.server.rstrip("/")
    parsed = urlparse(server)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        p.error(f"--server must be the portal's URL, like http://host:8000 (got {a.server!r})")
    return Config(
        server=server, join_token=a.join_token, pool=a.pool, workdir=Path(a.workdir).resolve(), slots=a.slots,
        name=a.name or socket.gethostname(), address=a.address or _outbound_address(server), heartbeat_s=a.heartbeat,
        claim_wait_s=min(a.claim_wait, 25.0), drain_timeout_s=a.drain_timeout, ship_interval_s=a.ship_interval,
        sample_interval_s=a.sample_interval, energy_interval_s=a.energy_interval,
        spool_max_bytes=int(a.spool_max_mb * 1024 * 1024), watts_per_core=a.watts_per_core,
        request_timeout_s=a.request_timeout, repo_root=Path(__file__).resolve().parents[1], isolation=isolation,
        single_tenant=a.single_tenant, job_memory_per_device=job_memory, job_python=a.job_python,
        container=Settings(cli=shutil.which("docker") or "docker", host=a.docker_host, network=a.container_network,
                           python=a.container_python, mounts=mounts,
                           pythonpath=tuple(d.strip() for d in a.container_pythonpath.split(",") if d.strip())),
    )
