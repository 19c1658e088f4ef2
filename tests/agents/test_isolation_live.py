"""Issue 24, acceptance 1 to 3, on a real stack with an agent running as root (--isolation users):

1. Two runs of different teams (vision/digits, nlp/tiny-lm) on one node, each with its project's
   secret: each job tries to read the other's environment, run directory and checkpoint, the
   agent's credential and environment (where its join token is): every attempt is denied
   (PermissionError, errno 13), and each job reads its own secret.
2. While they run, no command line that ``ps`` shows holds the join token, the node credential or
   a secret; the jobs' environments hold their own secret and neither of the agent's.
3. A job past its 200 MiB memory limit fails as the user's error, "exceeded its memory limit";
   a second job on the node succeeds, and the agent stays up.

The jobs run on an interpreter any user can run (the venv's Python lives under /root, 0700 here),
from a folder any user can pass through (pytest's temporary folders are 0700).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import isolation
from tests.agents.helpers import join_token, run_row, submit, wait_status
from tests.fixtures.live import PYTHON, LiveStack
from tests.reliability.helpers import make_stack

pytestmark = [pytest.mark.live, pytest.mark.process,
              pytest.mark.skipif(os.geteuid() != 0, reason="per-job users need the agent to run as root")]

NAME = "TY_PROBE"

PROBE = r'''
import hashlib, json, os, sys, time
team, want, agent_pid, credential, meet = sys.argv[1:6]
mine = hashlib.sha256(os.environ.get("TY_PROBE", "").encode()).hexdigest() == want
run_dir, ckpt_dir = os.environ["TRAINYARD_RUN_DIR"], os.environ["TRAINYARD_CHECKPOINT_DIR"]
with open(os.path.join(run_dir, "mine.txt"), "w") as fh:
    fh.write(team)
ckpt = os.path.join(ckpt_dir, "probe.ckpt")
with open(ckpt, "w") as fh:
    fh.write("weights of " + team)
def wait(path):
    deadline = time.time() + 180
    while not os.path.exists(path):
        if time.time() > deadline:
            sys.exit(f"gave up waiting for {path}")
        time.sleep(0.1)
tmp = os.path.join(meet, team + ".tmp")
with open(tmp, "w") as fh:
    json.dump({"pid": os.getpid(), "run_dir": run_dir, "ckpt": ckpt}, fh)
os.chmod(tmp, 0o644)
os.replace(tmp, os.path.join(meet, team + ".json"))
other = "nlp" if team == "vision" else "vision"
wait(os.path.join(meet, other + ".json"))
with open(os.path.join(meet, other + ".json")) as fh:
    them = json.load(fh)
def probe(what, read):
    try:
        read()
        print(f"PROBE {what}: READ", flush=True)
    except OSError as err:
        print(f"PROBE {what}: DENIED {type(err).__name__} {err.errno}", flush=True)
probe("environment", lambda: open(f"/proc/{them['pid']}/environ", "rb").read())
probe("run directory", lambda: os.listdir(them["run_dir"]))
probe("run file", lambda: open(os.path.join(them["run_dir"], "mine.txt")).read())
probe("checkpoint", lambda: open(them["ckpt"], "rb").read())
probe("credential", lambda: open(credential).read())
probe("agent environment", lambda: open(f"/proc/{agent_pid}/environ", "rb").read())
print(f"PROBE uid {os.getuid()}", flush=True)
print("PROBE own secret:", "OK" if mine else "WRONG", flush=True)
open(os.path.join(meet, team + ".done"), "w").close()
wait(os.path.join(meet, "go"))
'''

TEMPLATE = """
from apps.jobtemplates.recipes import LOCAL_RESOURCES
from apps.jobtemplates.services import template_create
template_create(slug={slug!r}, publish=True, title="Isolation probe", kind="train", entrypoint={entrypoint!r},
                param_schema={{"type": "object", "properties": {{}}}}, resources=dict(LOCAL_RESOURCES),
                checkpoint_policy={{}}, max_restarts=0, environment={{"secrets": ["{name}"]}})
"""

HOG = "import time\nchunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n    time.sleep(0.01)\n"
CALM = "import time\ntime.sleep(4)\nprint('calm done', flush=True)\n"


@functools.cache
def _job_python() -> str:
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            subprocess.run([candidate, "-c", "pass"], capture_output=True, user=65534, group=65534, extra_groups=[], cwd="/",
                           check=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        return candidate
    pytest.skip("no Python here that an unprivileged user can run")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """Workdir, scripts and the jobs' meeting place, in a folder any user can pass through."""
    path = Path(tempfile.mkdtemp(prefix="ty-isolation-live-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _start_agent(stack: LiveStack, workdir: Path, token: str, *extra: str) -> subprocess.Popen[bytes]:
    # The join token goes in the environment: a command line is anyone's to read (ps).
    argv = [PYTHON, "-m", "agents", "--server", stack.url, "--pool", "local", "--workdir", str(workdir), "--name", "shared-node",
            "--heartbeat", "1", "--claim-wait", "5", "--drain-timeout", "1", "--energy-interval", "1", "--slots", "2",
            "--isolation", "users", "--job-python", _job_python(), *extra]
    proc = stack.spawn("shared-node", argv, env={"TRAINYARD_AGENT_NO_GPU": "1", "TRAINYARD_AGENT_JOIN_TOKEN": token})
    stack.procs = {"shared-node": stack.procs.pop("shared-node"), **stack.procs}
    stack.wait_for(lambda: (workdir / "credential").exists(), 60, "the agent to register")
    return proc


def _script(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / name
    path.write_text(text)
    os.chmod(path, 0o644)
    return path


def _rank_log(workdir: Path, run_id: int) -> str:
    return (workdir / "runs" / str(run_id) / "a1-r0" / "agent" / "rank0.stdout.log").read_text()


def _project_id(stack: LiveStack, token: str, slug: str) -> int:
    return next(p["id"] for p in stack.api("GET", "/api/v1/projects/", token=token)["results"] if p["full_slug"] == slug)


def test_two_teams_on_one_node_cannot_reach_each_other_or_the_agent(tmp_path: Path, redis_url: str, open_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=30)
    workdir, meet = open_dir / "agent", open_dir / "meet"
    meet.mkdir()
    os.chmod(meet, 0o1777)
    probe = _script(open_dir / "jobs", "probe.py", PROBE)
    values = {"vision": "tysec-v-" + secrets.token_hex(16), "nlp": "tysec-n-" + secrets.token_hex(16)}
    try:
        stack.start_web()
        stack.start_worker()
        token = join_token(stack)
        agent = _start_agent(stack, workdir, token)
        credential = (workdir / "credential").read_text().strip()
        prefix = f"ty-{isolation.agent_tag(workdir.resolve())}-"
        users = {"vision": ("alice", "vision/digits"), "nlp": ("bob", "nlp/tiny-lm")}
        runs: dict[str, int] = {}
        for team, (username, project) in users.items():
            api_token = stack.token(username)
            pid = _project_id(stack, api_token, project)
            stack.api("POST", f"/api/v1/projects/{pid}/secrets/", {"name": NAME, "value": values[team]}, token=api_token, expect=201)
            want = hashlib.sha256(values[team].encode()).hexdigest()
            entrypoint = f"{_job_python()} {probe} {team} {want} {agent.pid} {workdir / 'credential'} {meet}"
            stack.manage("shell", "-c", TEMPLATE.format(slug=f"probe-{team}", entrypoint=entrypoint, name=NAME))
            tags = {"task": "probe", "dataset": "none", "candidate": "baseline", "family": "isolation"}
            run = stack.api("POST", "/api/v1/runs/", {"project": project, "template": f"probe-{team}", "params": {}, "tags": tags,
                                                      "secrets": [NAME]}, token=api_token, expect=201)
            runs[team] = run["id"]
        stack.wait_for(lambda: all((meet / f"{t}.done").exists() for t in users), 180, "both jobs to have probed")

        # Acceptance 2: while both run, no command line holds a token, the credential or a secret.
        table = subprocess.run(["ps", "-eo", "pid,user,args"], capture_output=True, text=True, check=True).stdout
        assert str(probe) in table and "agents.launch" in table, "the scan sees the jobs"
        for what, value in {"join token": token, "node credential": credential, **values}.items():
            assert value not in table, f"the {what} is on a command line:\n{table}"
        job_users = isolation.users_leftover(prefix)
        assert len(job_users) == 2, "each attempt runs as its own user"
        for team, info in ((t, json.loads((meet / f"{t}.json").read_text())) for t in users):
            environ = Path(f"/proc/{info['pid']}/environ").read_bytes()
            assert values[team].encode() in environ, "the secret is in its own job's environment"
            for value in (token, credential, values["nlp" if team == "vision" else "vision"]):
                assert value.encode() not in environ
            assert b"TRAINYARD_AGENT_" not in environ
        (meet / "go").touch()

        for team, run_id in runs.items():
            row = wait_status(stack, run_id, {"succeeded", "failed", "cancelled"}, 120)
            out = _rank_log(workdir, run_id)
            assert row["status"] == "succeeded", (row, out)
            assert "PROBE own secret: OK" in out, out
            for what in ("environment", "run directory", "run file", "checkpoint", "credential", "agent environment"):
                assert f"PROBE {what}: DENIED PermissionError 13" in out, f"{team}'s job and the {what}:\n{out}"
            assert "PROBE uid 0" not in out
        # Each attempt's user is removed when it ends.
        stack.wait_for(lambda: isolation.users_leftover(prefix) == [], 30, "the job users to be removed")
        assert agent.poll() is None
    finally:
        stack.close()


def test_a_job_past_its_memory_limit_fails_as_its_own_and_the_node_carries_on(tmp_path: Path, redis_url: str, open_dir: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=30)
    workdir = open_dir / "agent"
    hog = _script(open_dir / "jobs", "hog.py", HOG)
    calm = _script(open_dir / "jobs", "calm.py", CALM)
    try:
        stack.start_web()
        stack.start_worker()
        agent = _start_agent(stack, workdir, join_token(stack), "--job-memory-limit", "200M")
        hog_run = submit(stack, f"{_job_python()} {hog}")
        calm_run = submit(stack, f"{_job_python()} {calm}")
        hogged: dict[str, Any] = wait_status(stack, hog_run, {"succeeded", "failed", "queued"}, 120)
        assert hogged["status"] == "failed", hogged
        assert hogged["status_reason"].startswith("rank 0 exceeded its memory limit of 0.20 GiB"), hogged
        reason_code = stack.query("SELECT reason_code, restarts FROM runs_run WHERE id=?", (hog_run,))[0]
        assert reason_code == ("memory_limit", 0), "the user's error: failed, not requeued"
        assert wait_status(stack, calm_run, {"succeeded", "failed"}, 120)["status"] == "succeeded"
        assert "calm done" in _rank_log(workdir, calm_run)
        assert agent.poll() is None, "the agent carries on"
        node = stack.query("SELECT state FROM nodes_node WHERE hostname='shared-node'")
        assert node and node[0][0] not in ("lost", "offline"), node
        # The node takes work after it too.
        again = submit(stack, f"{_job_python()} {calm}")
        assert wait_status(stack, again, {"succeeded", "failed"}, 120)["status"] == "succeeded"
        assert run_row(stack, again)["restarts"] == 0
    finally:
        stack.close()
