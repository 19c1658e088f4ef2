"""Slurm's output parsed, and the batch script a run becomes (no Slurm needed)."""

from __future__ import annotations

from datetime import UTC, datetime

from apps.slurm import cli

SHOW = ("JobId=7 JobName=trainyard-run3 JobState=FAILED Reason=NonZeroExitCode Requeue=1 Restarts=2 ExitCode=3:0 "
        "TimeLimit=00:01:00 StartTime=2026-11-26T17:34:53 EndTime=2026-11-26T17:35:00\n"
        "JobId=8 JobName=x JobState=PENDING Reason=Resources Restarts=0 ExitCode=0:0 TimeLimit=00:05:00 StartTime=Unknown\n"
        "JobId=9 JobName=y JobState=CANCELLED Reason=None Restarts=0 ExitCode=0:15 TimeLimit=1-00:00:00 StartTime=None\n")


def test_parse_show_job() -> None:
    jobs = cli.parse_show_job(SHOW)
    assert jobs["7"] == cli.JobInfo(job_id="7", state="FAILED", reason="NonZeroExitCode", exit_code=3, signal=None, restarts=2,
                                    start_time=datetime(2026, 11, 26, 17, 34, 53, tzinfo=UTC), time_limit="00:01:00")
    assert jobs["7"].ended and not jobs["8"].ended
    assert (jobs["8"].state, jobs["8"].reason, jobs["8"].start_time) == ("PENDING", "Resources", None)
    assert (jobs["9"].exit_code, jobs["9"].signal) == (0, 15)


def test_time_limit_in_whole_minutes() -> None:
    assert [cli.time_limit(s) for s in (1, 59, 60, 61, 3600)] == ["1", "1", "1", "2", "60"]
