"""The Slurm commands the portal runs (sbatch, scontrol, scancel), and their output parsed.

They run on the worker's machine, behind the pool's `submit_command` prefix when it has one (an
ssh to a login node). No Django import: plain values in, plain values out.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

TIMEOUT_S = 60.0
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"})


class SlurmError(Exception):
    """A Slurm command failed or could not be run."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    reason: str
    exit_code: int | None
    signal: int | None
    restarts: int
    start_time: datetime | None  # expected while pending (backfill's estimate), actual once started
    time_limit: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def run(prefix: Sequence[str], argv: Sequence[str], *, stdin: str | None = None) -> str:
    try:
        done = subprocess.run([*prefix, *argv], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmError(f"{argv[0]}: {err}") from err
    if done.returncode != 0:
        raise SlurmError(f"{argv[0]} exited {done.returncode}: {(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


def sbatch(prefix: Sequence[str], script: str) -> str:
    """Submit a batch script (on stdin, so it works through ssh too); the job id."""
    out = run(prefix, ["sbatch", "--parsable"], stdin=script).strip()
    job_id = out.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {out!r}, not a job id")
    return job_id


def scancel(prefix: Sequence[str], job_id: str) -> None:
    run(prefix, ["scancel", job_id])


def _time(text: str) -> datetime | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        # Slurm prints the controller's local time; the test cluster and servers run in UTC.
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_show_job(text: str) -> dict[str, JobInfo]:
    """`scontrol show job -o` (one line per job) -> JobInfo by job id."""
    jobs: dict[str, JobInfo] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w[\w/:]*)=(\S*)", line))
        job_id = fields.get("JobId")
        if not job_id:
            continue
        code, _, sig = fields.get("ExitCode", "").partition(":")
        jobs[job_id] = JobInfo(
            job_id=job_id, state=fields.get("JobState", ""), reason=fields.get("Reason", ""),
            exit_code=int(code) if code.isdigit() else None, signal=int(sig) if sig.isdigit() and int(sig) else None,
            restarts=int(fields.get("Restarts", "0") or 0) if fields.get("Restarts", "0").isdigit() else 0,
            start_time=_time(fields.get("StartTime", "")), time_limit=fields.get("TimeLimit", ""))
    return jobs


def show_jobs(prefix: Sequence[str], job_ids: Sequence[str]) -> dict[str, JobInfo]:
    """The jobs Slurm still knows (it forgets ended ones after MinJobAge, 300 s by default)."""
    if not job_ids:
        return {}
    try:
        out = run(prefix, ["scontrol", "show", "job", "-o", ",".join(job_ids)])
    except SlurmError as err:
        if "Invalid job id" not in str(err):
            raise
        # One forgotten job fails the whole query: ask for each alone.
        out = ""
        for job_id in job_ids:
            try:
                out += run(prefix, ["scontrol", "show", "job", "-o", job_id])
            except SlurmError as one:
                if "Invalid job id" not in str(one):
                    raise
    return parse_show_job(out)


def time_limit(seconds: int) -> str:
    """sbatch --time in whole minutes (Slurm keeps limits in minutes), at least one."""
    return str(max(1, -(-int(seconds) // 60)))
