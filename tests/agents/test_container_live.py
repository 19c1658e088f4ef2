"""Issue 24, acceptance 5, with a real Docker engine (a private dockerd, tests/agents/dockerd.py) and
an agent in container mode (``--isolation docker``, as root: a Unix user per attempt is the
container's user):

- a digits run in an approved image succeeds, its lineage names the image and its digest, and it
  ran as a non-root user with no network;
- an image off the approved list is refused at submission (400 naming ``image``);
- with the pool's network policy ``none``, the job cannot open a socket to the portal's port on the
  host (the test itself can), yet the metrics it logs arrive.

The image is Debian bookworm minbase with Python 3 (built once, cached); torch and scikit-learn
come from this test's virtualenv, mounted read-only as an admin mounts a shared toolchain.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import container
from tests.agents import dockerd
from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import make_stack

pytestmark = [pytest.mark.live, pytest.mark.process, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="a private Docker engine needs root (CI runs as root)")]

TAGS = {"task": "classification", "dataset": "digits", "candidate": "baseline", "family": "containers"}
SITE = "/opt/ty-site"
# One line per host: whether a TCP connection to the portal's port opened, and why not; then the
# count as a metric (through the SDK and the run directory), and the network interfaces it sees.
NET_PROBE = """\
import json, os, socket, trainyard
p = json.loads(os.environ['TRAINYARD_PARAMS']); b = 0
for h in p['hosts'].split(','):
 try: socket.create_connection((h, p['port']), 5).close(); print('NET reached', h)
 except OSError as e: b += 1; print('NET blocked', h, type(e).__name__, e)
print('NET interfaces', sorted(n for _, n in socket.if_nameindex()), 'uid', os.getuid())
trainyard.log(1, blocked=b)
"""
SETUP = """
from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.recipes import LOCAL_RESOURCES
from apps.jobtemplates.services import EDITABLE_FIELDS, image_approve, template_create
image = image_approve(name={name!r}, digest={digest!r}, description="bookworm minbase, Python 3")
digits = JobTemplate.objects.filter(slug="digits-classifier", published=True).order_by("-version").first()
fields = {{n: getattr(digits, n) for n in EDITABLE_FIELDS}}
template_create(slug="digits-in-container", publish=True, **{{**fields, "image": image}})
schema = {{"type": "object", "properties": {{"port": {{"type": "integer", "default": 1}}, "hosts": {{"type": "string", "default": ""}}}}}}
template_create(slug="net-probe", publish=True, title="Network probe", kind="train", entrypoint={probe!r}, param_schema=schema,
                resources=dict(LOCAL_RESOURCES), checkpoint_policy={{}}, max_restarts=0, image=image)
"""


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[dockerd.Engine, str]]:
    """A private dockerd and the test image in it, once for this module."""
    started = dockerd.engine_start()
    try:
        yield started, dockerd.image_import(started)
    finally:
        started.stop()


@pytest.fixture(scope="module")
def boxed(tmp_path_factory: pytest.TempPathFactory, redis_url: str, engine: tuple[dockerd.Engine, str]) -> Iterator[LiveStack]:
    """One stack for this module's tests (each start costs about 20 s): web, worker, and an agent
    in container mode on the private engine, with the approved image and two templates naming it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        stack = _boxed_stack(tmp_path_factory.mktemp("boxed"), redis_url, monkeypatch, engine)
        try:
            yield stack
        finally:
            stack.close()


def _boxed_stack(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, engine: tuple[dockerd.Engine, str]) -> LiveStack:
    docker, image_id = engine
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=60)
    stack.start_web()
    stack.start_worker()
    probe = f"python -c {shlex.quote(NET_PROBE)}"
    assert len(probe) <= 500, "a template's entrypoint is at most 500 characters"
    made = stack.manage("shell", "-c", SETUP.format(name=dockerd.IMAGE_TAG, digest=image_id, probe=probe), check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    site = sysconfig.get_paths()["purelib"]
    start_agent(stack, "boxed-node", extra=["--isolation", "docker", "--docker-host", docker.host, "--container-python", "python3",
                                             "--container-mount", f"{site}:{SITE}", "--container-pythonpath", SITE,
                                             "--container-network", "none", "--job-memory-limit", "2G"])
    return stack


def _submit(stack: LiveStack, token: str, template: str, params: dict[str, Any], **extra: Any) -> tuple[int, Any]:
    return stack.request("POST", "/api/v1/runs/", {"project": "vision/digits", "template": template, "params": params,
                                                   "tags": TAGS, **extra}, token=token)


def _finished(stack: LiveStack, run_id: int, timeout: float) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        rows = stack.query("SELECT status, status_reason FROM runs_run WHERE id=?", (run_id,))
        return {"status": rows[0][0], "reason": rows[0][1]} if rows and rows[0][0] in ("succeeded", "failed", "cancelled") else None
    return dict(stack.wait_for(done, timeout, f"run {run_id} to finish"))


def _rank_log(stack: LiveStack, run_id: int) -> str:
    folder = stack.workdir / "agent-boxed-node" / "runs" / str(run_id) / "a1-r0" / "agent"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))


def _environment(stack: LiveStack, run_id: int) -> dict[str, Any]:
    def found() -> Any:
        rows = stack.query("SELECT e.environment FROM tracking_attemptenvironment e JOIN runs_attempt a ON a.id = e.attempt_id "
                           "WHERE a.run_id=?", (run_id,))
        return rows and rows[0][0]
    value = stack.wait_for(found, 60, f"run {run_id}'s lineage")
    return dict(json.loads(value) if isinstance(value, str) else value)


def test_digits_runs_in_an_approved_image_and_an_unapproved_one_is_refused(boxed: LiveStack,
                                                                          engine: tuple[dockerd.Engine, str]) -> None:
    stack, image_id = boxed, engine[1]
    token = stack.token("alice")
    status, refused = _submit(stack, token, "digits-in-container", {"steps": 30}, image="evil/miner:latest")
    assert status == 400, refused
    assert refused["error"]["fields"]["image"] == ["'evil/miner:latest' is not an approved image "
                                                   f"(approved: {dockerd.IMAGE_TAG})"]
    status, run = _submit(stack, token, "digits-in-container", {"steps": 30, "eval_every": 10})
    assert status == 201, run
    final = _finished(stack, run["id"], 300)
    if final["status"] != "succeeded":
        pytest.fail(f"{final}\n--- job ---\n{_rank_log(stack, run['id'])[-6000:]}\n--- agent ---\n{stack.log('boxed-node')[-4000:]}")
    environment = _environment(stack, run["id"])
    assert environment["container"]["digest"] == image_id, environment
    assert environment["container"]["image"] == dockerd.IMAGE_TAG
    assert environment["container"]["network"] == "none"
    assert not environment["container"]["user"].startswith("0:"), "the container's user is not root"
    assert environment["python"]["version"].startswith("3.11"), "the probe ran in the image's Python"
    assert environment["torch"]["version"].startswith("2.13.0"), environment
    metrics = stack.wait_for(lambda: stack.query("SELECT key FROM tracking_metricsummary WHERE run_id=?", (run["id"],)), 60,
                             "the run's metrics")
    assert {"loss", "val_accuracy"} <= {k for (k,) in metrics}, metrics
    detail = stack.api("GET", f"/api/v1/runs/{run['id']}/", token=token)
    assert detail["status"] == "succeeded"
    # The job's processes are the engine's children, not the agent's: the monitor follows the
    # container's first process, so its CPU time (here, the energy estimate) is counted.
    energy = stack.query("SELECT energy_j FROM runs_run WHERE id=?", (run["id"],))[0][0]
    assert energy > 5, f"{energy} J: more than the docker CLI's own CPU time"
    # Each attempt's container is removed when it ends.
    left = engine[0].docker("ps", "-aq", "--filter", "name=^ty-").stdout.split()
    assert left == [], left


def test_with_network_none_the_job_cannot_reach_the_portal_yet_its_metrics_arrive(boxed: LiveStack) -> None:
    stack = boxed
    # The control: from the host, the portal's port opens.
    socket.create_connection(("127.0.0.1", stack.port), timeout=5).close()
    hosts = ["127.0.0.1"]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 9))  # picks the route only; sends nothing
            hosts.append(str(probe.getsockname()[0]))
    except OSError:
        pass  # no route off the host: loopback is the portal's address anyway
    token = stack.token("alice")
    status, run = _submit(stack, token, "net-probe", {"port": stack.port, "hosts": ",".join(dict.fromkeys(hosts))})
    assert status == 201, run
    final = _finished(stack, run["id"], 240)
    out = _rank_log(stack, run["id"])
    if final["status"] != "succeeded":
        pytest.fail(f"{final}\n--- job ---\n{out[-6000:]}\n--- agent ---\n{stack.log('boxed-node')[-4000:]}")
    assert "NET reached" not in out, out
    for host in dict.fromkeys(hosts):
        assert f"NET blocked {host}" in out, out
    assert "NET interfaces ['lo'] uid" in out, out
    assert "uid 0\n" not in out
    rows = stack.wait_for(lambda: stack.query("SELECT value FROM tracking_metricpoint WHERE run_id=? AND key='blocked'",
                                              (run["id"],)), 60, "the job's metric")
    assert rows == [(float(len(dict.fromkeys(hosts))),)], rows


def test_a_cancelled_run_stops_in_its_container_and_the_container_goes(boxed: LiveStack, engine: tuple[dockerd.Engine, str]) -> None:
    """The agent's SIGTERM reaches the job through the docker CLI and the launcher (PID 1 in the
    container), the job stops within its grace period, and the container is removed."""
    stack = boxed
    token = stack.token("alice")
    status, run = _submit(stack, token, "digits-in-container", {"steps": 100000, "eval_every": 1000})
    assert status == 201, run
    stack.wait_for(lambda: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (run["id"],))[0][0] > 0, 180,
                   "the run to make progress")
    assert engine[0].docker("ps", "-q", "--filter", "name=^ty-").stdout.split(), "it runs in a container"
    stack.api("POST", f"/api/v1/runs/{run['id']}/cancel/", {}, token=token)
    final = _finished(stack, run["id"], 120)
    assert final["status"] == "cancelled", final
    stack.wait_for(lambda: not engine[0].docker("ps", "-aq", "--filter", "name=^ty-").stdout.split(), 60,
                   "the container to be removed")
    exits = stack.query("SELECT exit_code, signal FROM runs_attempt WHERE run_id=?", (run["id"],))
    assert exits and exits[0][1] != 9, f"stopped by its SIGTERM within the grace period, not killed: {exits}"


def test_the_agent_finds_the_approved_image_by_digest_only(engine: tuple[dockerd.Engine, str]) -> None:
    """A tag is not enough: the image on the node must have the approved digest (its id here),
    else the job does not start, and says why."""
    docker = container.Docker(container.Settings(host=engine[0].host))
    found = docker.image_resolve({"name": dockerd.IMAGE_TAG, "digest": engine[1]})
    assert found.id == engine[1] and found.lineage()["digest"] == engine[1]
    wrong = "sha256:" + "0" * 64
    with pytest.raises(container.ContainerError, match="is not on this node and could not be pulled"):
        docker.image_resolve({"name": dockerd.IMAGE_TAG, "digest": wrong})
    assert docker.problem() == ""
    assert container.Docker(container.Settings(host="unix:///nonexistent.sock")).problem().startswith("the Docker engine does not answer")
