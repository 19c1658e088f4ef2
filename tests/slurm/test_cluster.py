"""The test cluster itself: a batch job runs and Slurm keeps its real exit code."""

from __future__ import annotations

import re
import time

import pytest

from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.live, pytest.mark.process]


def test_batch_job_exit_code(slurm_cluster: SlurmCluster, tmp_path: object) -> None:
    job = slurm_cluster.command("sbatch", "--parsable", "--wrap", "exit 3", "-o", "/dev/null").strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = slurm_cluster.command("scontrol", "show", "job", "-o", job)
        if "JobState=FAILED" in record:
            break
        time.sleep(0.3)
    assert re.search(r"\bExitCode=3:0\b", record), record
