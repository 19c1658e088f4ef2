"""What the agent tells the person running it: --help, each refused registration with what to do,
a server it cannot reach (retried with backoff; Ctrl-C still stops it), the first start without a
join token, its idle CPU slots' readings, and (live) a drain, an undrain and an outage as they
happen."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents import agent as agent_mod
from agents import monitor as monitor_mod
from agents.agent import Registration, registration_advice
from agents.client import ApiError
from agents.client import Client as AgentClient
from agents.config import parse_args
from agents.devices import Nvml
from agents.monitor import Monitor
from agents.runner import Runner
from apps.nodes.models import NodePool
from apps.nodes.services import join_token_create
from tests.agents.helpers import start_agent
from tests.fixtures.live import PYTHON, ROOT, LiveStack
from tests.fixtures.services import free_port

REGISTER = "/api/v1/agent/register/"


def agent_argv(*args: str) -> list[str]:
    return [PYTHON, "-m", "agents", *args]


def run_agent(*args: str, timeout: float = 20, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agent_argv(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TRAINYARD_AGENT_NO_GPU": "1", **(env or {})})


@pytest.mark.live
@pytest.mark.process
def test_help_gives_units_environment_and_the_first_start() -> None:
    done = run_agent("--help", env={"TRAINYARD_AGENT_JOIN_TOKEN": "tyj_secret-from-env"})
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in ("--heartbeat SECONDS seconds between heartbeats (env TRAINYARD_AGENT_HEARTBEAT_S; default: 5)",
                  "--drain-timeout SECONDS seconds running jobs may go on after SIGTERM",
                  "--spool-max-mb MB megabytes of unsent reports", "--server URL the portal's base URL",
                  "python manage.py agent_join_token --pool NAME", "python -m agents --server https://portal.example.com "
                  "--join-token tyj_... --pool NAME", "retries with backoff"):
        assert words in text, words
    assert "tyj_secret-from-env" not in done.stdout  # a join token from the environment is never echoed


@pytest.mark.live
@pytest.mark.process
def test_a_server_url_without_a_scheme_is_refused_at_once() -> None:
    done = run_agent("--server", "portal.example.com:8000", "--join-token", "tyj_x")
    assert done.returncode == 2 and "--server must be the portal's URL, like http://host:8000" in done.stderr


@pytest.mark.live
@pytest.mark.process
def test_the_first_start_without_a_join_token_says_where_to_get_one(tmp_path: Path) -> None:
    port = free_port()  # nothing listens: the agent must not even need the server to say this
    started = time.monotonic()
    done = run_agent("--server", f"http://127.0.0.1:{port}", "--pool", "gpu-a100", "--workdir", str(tmp_path / "w"))
    assert done.returncode == 2 and time.monotonic() - started < 15
    assert "no join token given (--join-token or TRAINYARD_AGENT_JOIN_TOKEN)" in done.stderr
    assert "python manage.py agent_join_token --pool gpu-a100" in done.stderr and "retrying" not in done.stderr


@pytest.mark.live
@pytest.mark.process
def test_an_unreachable_server_is_retried_with_backoff_and_ctrl_c_stops_the_agent(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "agent.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(agent_argv("--server", f"http://127.0.0.1:{port}", "--join-token", "tyj_x", "--workdir",
                                           str(tmp_path / "w")), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "TRAINYARD_AGENT_NO_GPU": "1"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while "(try 5)" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text()
        # Which server, what went wrong, and when the next try is.
        assert f"POST http://127.0.0.1:{port}/api/v1/agent/register/ failed (" in text and "retrying in " in text, text
        assert proc.poll() is None, "it keeps trying"
        proc.send_signal(signal.SIGINT)
        # It used to retry forever, deaf to SIGINT and SIGTERM alike, until killed with SIGKILL.
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert "got SIGINT before registering: stopping" in log.read_text()


def test_registration_keeps_saying_what_to_check_while_the_server_is_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(agent_mod, "REGISTER_NOTICE_S", 0.3)
    monkeypatch.setenv("TRAINYARD_AGENT_NO_GPU", "1")
    server = f"http://127.0.0.1:{free_port()}"
    config = parse_args(["--server", server, "--join-token", "tyj_x", "--workdir", str(tmp_path)])
    stop = threading.Event()
    client = AgentClient(server, stop=stop, backoff_base=0.01, backoff_max=0.05)
    threading.Timer(1.5, stop.set).start()
    caplog.set_level(logging.WARNING, logger="agents")
    with pytest.raises(agent_mod.Unreachable, match="stopped before registering"):
        Registration(config, client, Nvml()).register([], stop)
    notes = [r.getMessage() for r in caplog.records if r.name == "agents"]
    assert len(notes) >= 2, notes  # not once and then silence: again after every quiet stretch of retries
    assert notes[0].startswith(f"cannot reach the portal at {server} to register (")
    assert "Check that --server is the portal's URL and that this machine can reach it; still trying, with backoff" in notes[0]


def refused(body: dict[str, Any], path: str = REGISTER) -> ApiError:
    """The server's real answer to a registration, as the agent's client would raise it."""
    resp = APIClient().post(path, body, format="json")
    assert resp.status_code >= 400, resp.content
    try:
        parsed: Any = resp.json()
    except ValueError:
        parsed = resp.content.decode()
    return ApiError(resp.status_code, parsed, REGISTER)


def test_each_refused_registration_says_what_to_do(db: Any, tmp_path: Path) -> None:
    pool = NodePool.objects.create(name="local")
    NodePool.objects.create(name="gpu")
    _, secret = join_token_create(pool=pool)
    body = {"protocol_version": 1, "agent_uid": "u1", "hostname": "h1", "join_token": secret, "devices": [{"index": 0}]}

    def advice(err: ApiError, *argv: str) -> str:
        return registration_advice(err, parse_args(["--workdir", str(tmp_path), *argv]))

    bad = refused({**body, "join_token": "tyj_revoked"})
    text = advice(bad, "--join-token", "tyj_revoked", "--pool", "gpu")
    assert text.startswith("registration refused: the server does not accept this join token (unknown, revoked or expired)")
    assert "python manage.py agent_join_token --pool gpu" in text and "Nodes > Join tokens" in text
    assert "no join token was given" in advice(refused({**body, "join_token": ""}), "--pool", "local")

    wrong = advice(refused({**body, "pool": "gpu"}), "--join-token", secret, "--pool", "gpu")
    assert wrong.startswith("registration refused: the join token is for pool 'local', not 'gpu'. A join token is made for one "
                            "pool: start the agent with that pool's name in --pool")
    unknown = advice(refused({**body, "pool": "gpu-a100"}), "--join-token", secret, "--pool", "gpu-a100")
    assert unknown == ("registration refused: there is no node pool 'gpu-a100'; the join token is for pool 'local'. Start the "
                       "agent with the join token's pool in --pool")

    # --server with a path: the portal's own 404 page, an HTML page, not a screenful of it on the console.
    page = Client().post("/portal" + REGISTER, body, content_type="application/json")
    assert page.status_code == 404 and page.content.decode().lstrip().startswith("<")
    text = advice(ApiError(404, page.content.decode(), REGISTER), "--server", "http://portal:8000/portal")
    assert text == ("registration refused: http://portal:8000/portal has no Trainyard agent API at /api/v1/agent/register/ "
                    "(HTTP 404: an HTML page, not an answer of the Trainyard API); --server must be the portal's base URL, "
                    "like http://host:8000")
    assert "<" not in str(ApiError(404, page.content.decode(), REGISTER))


def test_idle_cpu_slots_report_no_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot whose job ended reports "no reading": the server then clears the job's last figures
    instead of showing them as the idle slot's for good."""
    monkeypatch.setenv("TRAINYARD_AGENT_NO_GPU", "1")
    monkeypatch.setattr(monitor_mod, "rapl_energy_uj", lambda: None)
    config = parse_args(["--workdir", str(tmp_path), "--slots", "3"])
    runner = Runner(config, client=None, shipper=None)  # type: ignore[arg-type]
    monitor = Monitor(config, runner, None, Nvml())  # type: ignore[arg-type]
    monitor.sample()
    assert monitor.samples() == [{"index": i, "utilization": None, "power_w": None} for i in range(3)]



@pytest.mark.live
@pytest.mark.process
def test_the_console_says_when_the_portal_drains_undrains_and_goes_away(live_stack: LiveStack) -> None:
    stack = live_stack
    start_agent(stack, "node-a")
    stack.wait_for(lambda: "registered as node" in stack.log("node-a"), 30, "the agent to register")
    assert "in pool local (session 1; 1 CPU slot)" in stack.log("node-a")
    [(node_id,)] = stack.query("SELECT id FROM nodes_node WHERE hostname='node-a'")
    admin = stack.token("admin")
    stack.api("POST", f"/api/v1/nodes/{node_id}/drain/", {}, token=admin)
    stack.wait_for(lambda: "the portal drained this node: it claims no new work" in stack.log("node-a"), 30, "the drain notice")
    stack.api("POST", f"/api/v1/nodes/{node_id}/undrain/", None, token=admin)
    stack.wait_for(lambda: "the portal undrained this node: claiming work again" in stack.log("node-a"), 30, "the undrain notice")
    stack.stop("web")
    stack.wait_for(lambda: f"heartbeat: cannot reach the portal at {stack.url}" in stack.log("node-a"), 30, "the outage notice")
    assert "jobs keep running and their reports wait on disk" in stack.log("node-a")
    stack.start_web()
    stack.wait_for(lambda: f"the portal at {stack.url} answers again after" in stack.log("node-a"), 30, "the recovery notice")
    # Its own drain (SIGTERM) comes back from the server as "draining": not an administrator's drain.
    stack.stop("node-a")
    log = stack.log("node-a")
    assert "got SIGTERM: draining" in log and "agent stopped" in log
    assert log.count("the portal drained this node") == 1, log
