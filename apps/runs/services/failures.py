"""Why a rank failed: the user's code (the run fails) or the infrastructure (the run is requeued and
resumes from its checkpoint, avoiding the node). Plain Python: exit code, signal and the last log
lines in, a class out.

A communication error is a symptom: in a gang, the peers of a rank that crashed lose their
connections too. It is only blamed when no rank of the gang reports a cause of its own.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass

# A SIGKILL the agent did not send is the kernel's OOM killer (or an operator); 137 = a shell's 128 + 9.
OOM_EXIT_CODE = 128 + signals.SIGKILL
USER, INFRA = "user", "infra"

# Signals a process gets from outside (an operator, the OOM killer, a dying host) rather than from its own bug.
_OUTSIDE_SIGNALS = {signals.SIGKILL, signals.SIGTERM, signals.SIGINT, signals.SIGHUP}

_PATTERNS: list[tuple[str, str, re.Pattern[str]]] = [
    ("port_in_use", "the rendezvous port was in use", re.compile(r"EADDRINUSE|address already in use", re.I)),
    ("device_error", "a GPU fault", re.compile(
        r"uncorrectable ECC|ECC error|\bXid\b|GPU is lost|NVML_ERROR_GPU_IS_LOST|cudaErrorECCUncorrectable|"
        r"CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable|unspecified launch failure",
        re.I)),
    ("comm_error", "a communication error between ranks", re.compile(
        r"ProcessGroupGloo|Gloo connect|gloo::|NCCL (WARN|error)|ncclSystemError|ncclRemoteError|ncclInternalError|"
        r"DistNetworkError|DistStoreError|Connection (reset|closed|refused) by peer|Broken pipe|"
        r"Socket Timeout|timed out after .* waiting for rendezvous|RendezvousTimeout|NCCL watchdog", re.I)),
]
# The agent's line when the kernel killed a job at its cgroup's memory limit (agents.isolation):
# the job asked for more than it was given, which no other node would change.
_MEMORY_LIMIT = re.compile(r"exceeded its memory limit of ([0-9.]+ GiB)")
# Codes whose cause lies in the gang's own rank (not a reaction to a peer): the order in which
# the gang's outcome picks among several ranks' failures, most telling first.
PRECEDENCE = ["exit_code", "crashed", "memory_limit", "device_error", "oom_killed", "killed", "port_in_use", "comm_error"]


@dataclass(frozen=True)
class Failure:
    cls: str  # USER or INFRA
    code: str  # reason_code: exit_code, crashed, memory_limit, oom_killed, killed, port_in_use, device_error, comm_error
    words: str  # "rank 3 failed with exit code 1"

    @property
    def requeue(self) -> bool:
        return self.cls == INFRA

    @property
    def symptom(self) -> bool:
        """A reaction to another rank's failure: wait for the others before blaming it."""
        return self.code == "comm_error"


def classify_exit(*, rank: int | None, exit_code: int | None, signal: int | None, log_tail: str = "") -> Failure:
    """The class of one failed rank's exit (exit code 0 and no signal is not a failure: don't ask)."""
    who = f"rank {rank}" if rank is not None else "the job"
    how = f"failed with exit code {exit_code}" if exit_code is not None else f"was killed by signal {signal} ({_signal_name(signal)})"
    if signal == signals.SIGKILL:
        how = f"was killed by signal {signal}"  # SIGKILL says nothing more than its number
    limit = _MEMORY_LIMIT.search(log_tail or "")
    if limit and (signal == signals.SIGKILL or exit_code == OOM_EXIT_CODE):
        return Failure(USER, "memory_limit", f"{who} exceeded its memory limit of {limit.group(1)}")
    for code, words, pattern in _PATTERNS:
        if pattern.search(log_tail or ""):
            return Failure(INFRA, code, f"{who} {how}: {words}")
    if signal == signals.SIGKILL or exit_code == OOM_EXIT_CODE:
        return Failure(INFRA, "oom_killed", f"{who} {how} (out of memory?)")
    if signal in _OUTSIDE_SIGNALS:
        return Failure(INFRA, "killed", f"{who} {how}, from outside the job")
    if signal is not None:
        return Failure(USER, "crashed", f"{who} crashed: it {how}")
    return Failure(USER, "exit_code", f"{who} {how}")


_CLASS = {"exit_code": USER, "crashed": USER, "memory_limit": USER}


def failure_of(code: str, words: str) -> Failure:
    """A stored failure (Assignment.failure_code and .failure) back as a Failure."""
    return Failure(_CLASS.get(code, INFRA), code, words)


def retry_backoff_s(*, restarts: int, base_s: float, max_s: float) -> float:
    """Seconds before retry `restarts` (1 = the first): base, then doubling, capped."""
    return float(min(max_s, base_s * 2 ** max(0, restarts - 1)))


def gang_cause(failures: list[Failure]) -> Failure | None:
    """The failure the gang's outcome follows: a rank's own cause before a peer's reaction."""
    if not failures:
        return None
    return min(failures, key=lambda f: PRECEDENCE.index(f.code) if f.code in PRECEDENCE else len(PRECEDENCE))


def _signal_name(sig: int | None) -> str:
    try:
        return signals.Signals(int(sig or 0)).name
    except ValueError:
        return "unknown"
