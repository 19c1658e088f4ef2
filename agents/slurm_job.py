"""The Trainyard side of a Slurm batch job: a one-run agent inside the allocation.

The portal's sbatch script (apps.slurm.services.batch_script) runs ``python -m agents.slurm_job``
once per allocated node through srun. It claims the run's assignment over the agent protocol with
the node credential made for that one run, prepares and launches it as an agent does
(agents.runner: resume checkpoint, one process per device with torchrun's variables through
agents.launch), and ships metrics, logs, checkpoints and energy through the same spooled shipper
and monitor. Standard library only, like the agent.

Slurm owns the allocation: on SIGTERM (scancel, time limit, requeue) the job is stopped and what
it wrote is shipped, but no exit is reported; the portal's sync reads the outcome from Slurm.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from agents import protocol
from agents.client import ApiError, Client, Unreachable
from agents.config import Config
from agents.devices import Nvml
from agents.logcap import LogLimits
from agents.monitor import Monitor
from agents.runner import Job, Runner
from agents.shipper import Shipper, Spool

log = logging.getLogger("agents.slurm_job")
P = protocol.API_PREFIX
CLAIM_FOR_S = 300.0  # the portal makes the attempt within one sync of Slurm starting the job
HEARTBEAT_S = 2.0
FLUSH_S = 60.0


class SlurmShipper(Shipper):
    """Drops its own exit reports once Slurm ended the job: Slurm's record says why it ended."""

    slurm_ended = False

    def event(self, body: protocol.AttemptEvent) -> None:
        if self.slurm_ended and body.get("event") == "exited":
            log.info("attempt %d: stopped by Slurm; the portal reads the outcome from Slurm", body["attempt_id"])
            return
        super().event(body)


class SlurmJob:
    def __init__(self, workdir: Path, server: str, credential: str, session: int, node_rank: int) -> None:
        self.node_rank = node_rank
        self.session = session
        self.config = Config(server=server, join_token="", pool="", workdir=workdir, slots=1, name=socket.gethostname(),
                             address="", heartbeat_s=HEARTBEAT_S, claim_wait_s=10.0, drain_timeout_s=0.0, ship_interval_s=0.5,
                             sample_interval_s=1.0, energy_interval_s=5.0, spool_max_bytes=512 << 20, watts_per_core=10.0,
                             request_timeout_s=30.0, repo_root=Path(__file__).resolve().parents[1], isolation="none",
                             single_tenant=True, job_memory_per_device=0)
        self.stop = threading.Event()
        self.client = Client(server, timeout=30.0)
        self.client.credential = credential
        self.spool = Spool(self.config.spool_dir, self.config.spool_max_bytes)
        self.shipper = SlurmShipper(self.client, self.spool, interval=self.config.ship_interval_s, on_stale=self._stale,
                                    log_limits=LogLimits())
        self.runner = Runner(self.config, self.client, self.shipper)
        self.runner.cgroups = None  # Slurm confines the allocation
        self.monitor = Monitor(self.config, self.runner, self.shipper, Nvml())
        self.runner.on_exit = self.monitor.finish
        self.claimed: protocol.AssignmentSpec | None = None

    def _stale(self, attempt_id: int, reason: str) -> None:
        self.runner.kill(attempt_id, reason)

    def on_term(self, signum: int, frame: FrameType | None) -> None:
        self.shipper.slurm_ended = True
        self.runner.stop_all("abort", grace_s=3.0)

    # --- claiming ---------------------------------------------------------------------------
    def claim(self) -> protocol.AssignmentSpec | None:
        """This node's share of the run: the portal's claim answers once Slurm's start is synced.
        The first node to claim gets every node's share and leaves the others theirs on disk
        (the job folder is on storage every node sees)."""
        deadline = time.monotonic() + CLAIM_FOR_S
        mine = self.config.workdir.parent / f"claimed-{self.node_rank}.json"
        while time.monotonic() < deadline and not self.shipper.slurm_ended:
            if mine.exists():
                spec: protocol.AssignmentSpec = json.loads(mine.read_text())
                mine.unlink()  # a later start of the job (requeue) claims afresh
                return spec
            try:
                answer = self.client.request("POST", P + "claim/", {"session": self.session, "wait_s": 5}, retry_for=30.0)
            except (ApiError, Unreachable) as err:
                log.warning("claim failed: %s", err)
                time.sleep(1.0)
                continue
            specs: list[protocol.AssignmentSpec] = answer.get("assignments") or []
            found = None
            for spec in specs:
                if spec["node_rank"] == self.node_rank:
                    found = spec
                else:
                    path = self.config.workdir.parent / f"claimed-{spec['node_rank']}.json"
                    path.write_text(json.dumps(spec))
                    path.chmod(0o600)
            if found is not None:
                return found
        return None

    # --- running ----------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            body = {"session": self.session, "devices": self.monitor.samples(), "running": self.runner.running()}
            try:
                answer = self.client.request("POST", P + "heartbeat/", body, retry_for=HEARTBEAT_S)
            except (ApiError, Unreachable) as err:
                log.warning("heartbeat failed: %s", err)
                continue
            for order in answer.get("stop") or []:
                self.runner.request_stop(int(order["attempt_id"]), str(order["kind"]), float(order.get("grace_period_s") or 0))
            for attempt_id in answer.get("kill") or []:
                self.runner.kill(int(attempt_id), "the portal ended the attempt")

    def run(self) -> int:
        self.shipper.start()
        self.monitor.start()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        code = 0
        try:
            spec = self.claim()
            if spec is None:
                log.error("no assignment to claim for node rank %d within %.0f s", self.node_rank, CLAIM_FOR_S)
                return 1
            master = os.environ.get("TRAINYARD_SLURM_MASTER", "")
            if master and int(spec.get("nnodes") or 1) > 1:
                spec["master_addr"] = master
            spec["max_runtime_s"] = 0  # Slurm enforces the time limit (--time)
            if spec["number"] > 1:
                # An earlier start that Slurm stopped (requeue) may have written checkpoints here whose
                # metrics never reached the server: resume from the server's newest, as after a lost attempt.
                spec["lost_attempts"] = sorted(set(spec.get("lost_attempts") or []) | set(range(1, spec["number"])))
            self.runner.submit(spec)
            results: list[Any] = []

            def on_exit(job: Job) -> None:
                self.monitor.finish(job)
                results.append(job.proc.returncode)

            self.runner.on_exit = on_exit
            while True:
                self.runner.launch_ready()
                self.runner.poll()
                if not self.runner.busy():
                    break
                time.sleep(0.2)
            code = int(results[0]) if results and results[0] is not None else (0 if not self.shipper.slurm_ended else 143)
        finally:
            self.stop.set()
            self.monitor.close()
            self.shipper.close(flush_timeout=FLUSH_S)
        return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.slurm_job", description="Runs one Trainyard run's share inside "
                                     "a Slurm allocation (started by the portal's batch script).")
    parser.add_argument("--workdir", required=True, help="the run's folder on storage every node sees")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    node_rank = int(os.environ.get("SLURM_NODEID", "0"))
    credential = os.environ.pop("TRAINYARD_SLURM_CREDENTIAL", "")
    if not credential:
        parser.error("TRAINYARD_SLURM_CREDENTIAL is not set (the portal's batch script sets it)")
    job = SlurmJob(Path(args.workdir) / f"node{node_rank}", os.environ.get("TRAINYARD_SLURM_SERVER", "http://127.0.0.1:8000"),
                   credential, int(os.environ.get("TRAINYARD_SLURM_SESSION", "1")), node_rank)
    signal.signal(signal.SIGTERM, job.on_term)
    signal.signal(signal.SIGINT, job.on_term)
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
