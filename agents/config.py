"""Agent settings: command-line flags, with environment variables (TRAINYARD_AGENT_*) as defaults."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse


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


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(prog="python -m agents", description="Trainyard node agent")
    p.add_argument("--server", default=_env("SERVER", "http://127.0.0.1:8000"))
    p.add_argument("--join-token", default=_env("JOIN_TOKEN", ""), help="needed for the first registration only")
    p.add_argument("--pool", default=_env("POOL", "local"))
    p.add_argument("--workdir", default=_env("WORKDIR", "var/agent"))
    p.add_argument("--slots", type=int, default=int(_env("SLOTS", "1")), help="CPU slots offered when there is no GPU")
    p.add_argument("--name", default=_env("NAME", ""), help="hostname to report (default: this host's)")
    p.add_argument("--address", default=_env("ADDRESS", ""), help="address other ranks use to reach this node")
    p.add_argument("--heartbeat", type=float, default=float(_env("HEARTBEAT_S", "5")))
    p.add_argument("--claim-wait", type=float, default=float(_env("CLAIM_WAIT_S", "10")))
    p.add_argument("--drain-timeout", type=float, default=float(_env("DRAIN_TIMEOUT_S", "60")))
    p.add_argument("--ship-interval", type=float, default=float(_env("SHIP_INTERVAL_S", "0.5")))
    p.add_argument("--sample-interval", type=float, default=float(_env("SAMPLE_INTERVAL_S", "1")))
    p.add_argument("--energy-interval", type=float, default=float(_env("ENERGY_INTERVAL_S", "5")))
    p.add_argument("--spool-max-mb", type=float, default=float(_env("SPOOL_MAX_MB", "512")))
    p.add_argument("--watts-per-core", type=float, default=float(_env("WATTS_PER_CORE", "10")))
    p.add_argument("--request-timeout", type=float, default=float(_env("REQUEST_TIMEOUT_S", "30")))
    a = p.parse_args(argv)
    if a.slots < 1 or a.slots > 1024:
        p.error("--slots must be from 1 to 1024")
    if a.heartbeat <= 0 or a.drain_timeout < 0:
        p.error("--heartbeat must be > 0 and --drain-timeout >= 0")
    server = a.server.rstrip("/")
    return Config(
        server=server, join_token=a.join_token, pool=a.pool, workdir=Path(a.workdir).resolve(), slots=a.slots,
        name=a.name or socket.gethostname(), address=a.address or _outbound_address(server), heartbeat_s=a.heartbeat,
        claim_wait_s=min(a.claim_wait, 25.0), drain_timeout_s=a.drain_timeout, ship_interval_s=a.ship_interval,
        sample_interval_s=a.sample_interval, energy_interval_s=a.energy_interval,
        spool_max_bytes=int(a.spool_max_mb * 1024 * 1024), watts_per_core=a.watts_per_core,
        request_timeout_s=a.request_timeout, repo_root=Path(__file__).resolve().parents[1],
    )
