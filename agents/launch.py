"""The node launcher: one process per assigned device, with the environment torchrun sets.

The agent starts ``python -m agents.launch <plan.json>`` as the job's process-group leader. It
starts the ranks, tags their output by rank (``rank<R>.stdout.log``), and keeps the node's share
of the gang to one outcome: when a rank fails, the others get SIGTERM, then SIGKILL after the
grace period. It exits with the first failing rank's code and leaves ``result.json`` (every
rank's exit) for the agent. Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict

from agents.protocol import RankExit
from agents.redact import Redactor, pump

PR_SET_PDEATHSIG = 1
TICK_S = 0.05


class Plan(TypedDict):
    """What the agent writes for the launcher (agents.runner.launch_plan)."""

    argv: list[str]
    cwd: str
    log_dir: str
    node_rank: int
    nnodes: int
    local_world_size: int
    world_size: int
    # One entry per local rank: what CUDA_VISIBLE_DEVICES is for it ("" for CPU slots).
    visible_devices: list[str]
    grace_period_s: float
    # Names of the secrets in the environment: their values are redacted from the rank's output.
    secret_names: list[str]
    # In a container the agent's SIGTERM reaches the launcher alone (PID 1), not the ranks' group.
    forward_term: NotRequired[bool]


def rank_env(plan: Plan, local_rank: int, base: dict[str, str]) -> dict[str, str]:
    """torchrun's variables for one process (RANK is node-major, as torchrun numbers them)."""
    local_world = plan["local_world_size"]
    rank = plan["node_rank"] * local_world + local_rank
    return {
        **base,
        "RANK": str(rank), "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_world),
        "WORLD_SIZE": str(plan["world_size"]), "GROUP_RANK": str(plan["node_rank"]), "GROUP_WORLD_SIZE": str(plan["nnodes"]),
        "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(plan["world_size"]), "ROLE_NAME": "default",
        "CUDA_VISIBLE_DEVICES": plan["visible_devices"][local_rank],
    }


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class Rank:
    rank: int
    local_rank: int
    proc: subprocess.Popen[bytes]
    started: float
    pumps: list[threading.Thread]
    exit: RankExit | None = None


class Launcher:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.log_dir = Path(plan["log_dir"])
        self.ranks: list[Rank] = []
        self.first_failure: RankExit | None = None
        self.stopping = False  # the agent asked the job to stop (SIGTERM to the whole group)
        self.kill_at: float | None = None

    def start(self) -> None:
        secrets = {name: os.environ.get(name, "") for name in self.plan["secret_names"]}
        redactor = Redactor(secrets)
        base = dict(os.environ)
        for local_rank in range(self.plan["local_world_size"]):
            env = rank_env(self.plan, local_rank, base)
            rank = int(env["RANK"])
            out_path, err_path = (self.log_dir / f"rank{rank}.{stream}.log" for stream in ("stdout", "stderr"))
            pumps: list[threading.Thread] = []
            if redactor:
                proc = subprocess.Popen(self.plan["argv"], cwd=self.plan["cwd"], env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
                out: IO[bytes] | None = proc.stdout
                err: IO[bytes] | None = proc.stderr
                assert out is not None and err is not None
                pumps = [pump(out, str(out_path), redactor), pump(err, str(err_path), redactor)]
            else:
                with open(out_path, "ab") as out_fh, open(err_path, "ab") as err_fh:
                    proc = subprocess.Popen(self.plan["argv"], cwd=self.plan["cwd"], env=env, stdin=subprocess.DEVNULL,
                                            stdout=out_fh, stderr=err_fh, preexec_fn=_die_with_parent)
            self.ranks.append(Rank(rank=rank, local_rank=local_rank, proc=proc, started=time.monotonic(), pumps=pumps))

    def on_term(self, signum: int, frame: Any) -> None:
        # The agent signals the whole group: the ranks got the same SIGTERM and checkpoint.
        self.stopping = True
        if self.plan.get("forward_term"):
            self._signal_live(signal.SIGTERM)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + float(self.plan["grace_period_s"])

    def _signal_live(self, sig: int) -> None:
        for r in self.ranks:
            if r.exit is None:
                try:
                    r.proc.send_signal(sig)
                except ProcessLookupError:
                    continue

    def supervise(self) -> int:
        while any(r.exit is None for r in self.ranks):
            for r in self.ranks:
                if r.exit is not None:
                    continue
                code = r.proc.poll()
                if code is None:
                    continue
                r.exit = {"rank": r.rank, "local_rank": r.local_rank, "exit_code": code if code >= 0 else None,
                          "signal": -code if code < 0 else None, "seconds": round(time.monotonic() - r.started, 3)}
                if code != 0 and self.first_failure is None and not self.stopping:
                    self.first_failure = r.exit
                    print(f"trainyard launcher: rank {r.rank} failed ({_how(r.exit)}); stopping the other ranks on this node",
                          file=sys.stderr, flush=True)
                    self._signal_live(signal.SIGTERM)
                    self.kill_at = time.monotonic() + float(self.plan["grace_period_s"])
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self._signal_live(signal.SIGKILL)
            time.sleep(TICK_S)
        for r in self.ranks:
            for thread in r.pumps:
                thread.join(timeout=5)
        exits = [r.exit for r in self.ranks if r.exit is not None]
        result = {"ranks": exits, "failed_rank": self.first_failure["rank"] if self.first_failure else None}
        # In place, not renamed over: with per-job users the agent made the file for the job in a
        # folder the job may not write. The agent reads it only once the launcher has exited.
        with open(self.log_dir / "result.json", "w", encoding="utf-8") as fh:
            fh.write(json.dumps(result))
        failure = self.first_failure or next((e for e in exits if e["exit_code"] != 0), None)
        if failure is None:
            return 0
        return failure["exit_code"] if failure["exit_code"] is not None else 128 + int(failure["signal"] or 0)


def _how(exit: RankExit) -> str:
    return f"exit code {exit['exit_code']}" if exit["exit_code"] is not None else f"signal {exit['signal']}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan: Plan = json.loads(Path(args[0]).read_text())
    launcher = Launcher(plan)
    signal.signal(signal.SIGTERM, launcher.on_term)
    signal.signal(signal.SIGINT, launcher.on_term)
    launcher.start()
    return launcher.supervise()


if __name__ == "__main__":
    sys.exit(main())
