"""Issue 23 acceptance on a real agent over a fake NVML exposing 4 GPUs (tests/agents/fakenvml,
the mock of the GPU this machine lacks): the node registers 4 GPUs with their UUIDs; a 4-device
run starts 4 processes, each seeing one distinct GPU by UUID, and its energy is the sum of the 4
counters' deltas; an ECC fault injected on GPU 2 marks it unhealthy within one heartbeat, and no
run queued afterwards is placed on it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.agents.fakenvml import POWER_MW, make
from tests.agents.helpers import start_agent, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.process]

# Each process of the job appends "start end rank visible-GPUs" to the file named on its command line.
JOB = """
import os, sys, time
start = time.time()
time.sleep(float(sys.argv[2]))
with open(sys.argv[1], "a") as fh:
    fh.write(f"{start} {time.time()} {os.environ['RANK']} {os.environ.get('CUDA_VISIBLE_DEVICES', '')}\\n")
"""

SUBMIT = """
from django.db import transaction
from django.utils import timezone
from apps.audit.context import acting_as
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.core.queueing import request_scheduling_pass
from apps.tenants.models import Project
with acting_as(label="test"), transaction.atomic():
    template, _ = JobTemplate.objects.get_or_create(slug="debug-entrypoint", version=1, defaults={{
        "title": "Debug entrypoint", "kind": TemplateKind.CUSTOM, "entrypoint": "(per run)"}})
    run = Run.objects.create(project=Project.objects.get(team__slug="vision", slug="digits"), template=template,
                             pool=NodePool.objects.get(name="local"), entrypoint={entrypoint!r}, nodes=1,
                             devices_per_node={devices}, params={{}}, grace_period_s=5, max_runtime_s=600,
                             queued_at=timezone.now(), checkpoint_policy={{"every_steps": 0, "keep_last": 0}})
    request_scheduling_pass()
print(run.pk)
"""


def submit_devices(stack: LiveStack, entrypoint: str, devices: int) -> int:
    """A raw-entrypoint run asking for `devices` devices on one node (debug_run asks for one)."""
    done: subprocess.CompletedProcess[str] = stack.manage("shell", "-c", SUBMIT.format(entrypoint=entrypoint, devices=devices))
    return int(done.stdout.strip().splitlines()[-1])


def test_four_fake_gpus_energy_and_an_ecc_fault(live_stack: LiveStack, tmp_path: Path) -> None:
    stack = live_stack
    fake = make(tmp_path / "fakenvml", count=4)
    stack.start_worker()
    start_agent(stack, "gpu-node", env=fake.env(), extra=["--sample-interval", "0.5"])
    rows = stack.wait_for(lambda: len(r := stack.query(
        "SELECT d.id, d.kind, d.uuid, d.healthy FROM nodes_device d JOIN nodes_node n ON n.id = d.node_id "
        "WHERE n.hostname = 'gpu-node' ORDER BY d.\"index\"")) == 4 and r, 60, "the node to register 4 GPUs")
    assert [(kind, uuid, bool(ok)) for _, kind, uuid, ok in rows] == [("gpu", g.uuid, True) for g in fake.gpus]
    device_ids = [r[0] for r in rows]

    # A 4-device run: its energy is the 4 counters' deltas over the time it was measured, at
    # 100 + 200 + 300 + 400 W (a missing GPU would take 100 W or more off the rate).
    marks = tmp_path / "marks"
    job = write(tmp_path / "job.py", JOB)
    run = submit_devices(stack, f"python {job} {marks} 5", 4)
    assert wait_status(stack, run, {"succeeded", "failed"}, 90)["status"] == "succeeded"
    lines = [line.split() for line in marks.read_text().splitlines()]
    # One process per device, each seeing exactly its own GPU, named by UUID.
    assert sorted((int(rank), visible) for _, _, rank, visible in lines) == [(i, g.uuid) for i, g in enumerate(fake.gpus)]
    spans = [(float(start), float(end)) for start, end, _, _ in lines]
    ran = max(end for _, end in spans) - min(start for start, _ in spans)
    watts = sum(POWER_MW) / 1000

    def energy() -> float:
        [(joules, estimated)] = stack.query("SELECT energy_j, energy_estimated FROM runs_run WHERE id=?", (run,))
        assert not estimated, "GPU energy comes from the counters, not an estimate"
        return float(joules)

    # Measured from the first sample after the job started (at most a sampling interval late) to
    # a reading at its exit (after the interpreter started and stopped: up to a few seconds here).
    stack.wait_for(lambda: energy() >= watts * (ran - 1.0), 15, f"the run's energy to reach {watts} W x {ran - 1.0:.1f} s")
    assert energy() <= watts * (ran + 3.0), (energy(), ran)
    # Per device too: each GPU's own counter, in proportion to its power, with its utilization.
    per_device = {d: (e, u) for d, e, u in stack.query(
        "SELECT s.device_index, MAX(s.energy_j), MAX(s.utilization) FROM runs_energysample s "
        "JOIN runs_attempt t ON t.id = s.attempt_id WHERE t.run_id=? GROUP BY s.device_index", (run,))}
    assert sorted(per_device) == [0, 1, 2, 3], per_device
    for index, milliwatts in enumerate(POWER_MW):
        assert per_device[index][0] == pytest.approx(per_device[0][0] * milliwatts / POWER_MW[0], rel=0.1), per_device
        assert per_device[index][1] is not None

    # An ECC fault on GPU 2: unhealthy at the next heartbeat (1 s), its reason in words.
    fake.gpus[2].ecc_uncorrected = 3
    fake.write()
    injected = time.monotonic()
    stack.wait_for(lambda: stack.query("SELECT healthy FROM nodes_device WHERE id=?", (device_ids[2],))[0][0] in (0, False),
                   10, "GPU 2 to be marked unhealthy")
    assert time.monotonic() - injected < 4.0, "one heartbeat (1 s), with room for a loaded machine"
    [(reason,)] = stack.query("SELECT health_reason FROM nodes_device WHERE id=?", (device_ids[2],))
    assert reason.startswith("3 uncorrectable ECC errors since the driver loaded (volatile)")
    assert stack.query("SELECT count(*) FROM audit_auditevent WHERE action='device.unhealthy'")[0][0] == 1

    # Four 1-device runs queued afterwards: three run at once on GPUs 0, 1 and 3, the fourth when
    # one of them ends; none is ever placed on GPU 2.
    short = [submit_devices(stack, f"python {job} {tmp_path / f'marks-{i}'} 2", 1) for i in range(4)]
    for run_id in short:
        assert wait_status(stack, run_id, {"succeeded", "failed"}, 90)["status"] == "succeeded"
    placed = stack.query("SELECT a.devices FROM runs_assignment a JOIN runs_attempt t ON t.id = a.attempt_id "
                         f"WHERE t.run_id IN ({', '.join('?' * len(short))})", tuple(short))
    used = {int(d) for (devices,) in placed for d in (devices if isinstance(devices, list) else json.loads(devices))}
    assert used and 2 not in used, used
