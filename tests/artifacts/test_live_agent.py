"""trainyard.log_artifact under a real agent: a file and a folder reach the store and the run's
artifact list with the job's sha256, after the run finished."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.agents.helpers import start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.process]

JOB = """
import os, tempfile, trainyard
os.chdir(tempfile.mkdtemp())
os.makedirs("report/tables", exist_ok=True)
open("report/summary.json", "w").write('{"accuracy": 0.9}')
open("report/tables/loss.csv", "w").write("step,loss\\n1,0.5\\n2,0.25\\n")
open("weights.bin", "wb").write(bytes(range(256)) * 40)
trainyard.log(1, loss=0.5)
print(trainyard.log_artifact("weights.bin", name="model/weights.bin"))
print(trainyard.log_artifact("report"))
"""

EXPECTED = {
    "model/weights.bin": bytes(range(256)) * 40,
    "report/summary.json": b'{"accuracy": 0.9}',
    "report/tables/loss.csv": b"step,loss\n1,0.5\n2,0.25\n",
}


def test_log_artifact_file_and_folder_through_the_agent(live_stack: LiveStack, tmp_path: Path) -> None:
    live_stack.start_worker()
    start_agent(live_stack, "node-a")
    run = submit(live_stack, f"python {write(tmp_path / 'job.py', JOB)}")
    row = wait_status(live_stack, run, {"succeeded", "failed"}, 120)
    assert row["status"] == "succeeded", row
    rows = live_stack.wait_for(
        lambda: (r := live_stack.query("SELECT name, size, sha256 FROM artifacts_artifact WHERE run_id=? ORDER BY name", (run,)))
        and len(r) == len(EXPECTED) and r, 60, "the job's artifacts")
    assert [(n, s, h) for n, s, h in rows] == [(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in sorted(EXPECTED.items())]
