"""The `trainyard` CLI as a user runs it: a subprocess against a live server, a Celery worker and a
real agent that runs real jobs (the digits recipe with a few steps, and custom code that fails)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from apps.webhooks.services import webhook_verify
from tests.cli.conftest import Cli
from tests.fixtures.live import LiveStack
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.live

# A few seconds of CPU per run.
SMALL = {"steps": 30, "eval_every": 10, "batch_size": 32, "hidden": 32, "warmup_steps": 2}
TAGS = ["--tag", "task=classification", "--tag", "dataset=sklearn-digits", "--tag", "candidate=baseline", "--tag", "family=cli"]

FAILING = """\
import sys, time
import trainyard
trainyard.set_total_steps(4)
for step in range(4):
    print(f"custom line {step}", flush=True)
    trainyard.log(step, loss=1.0 / (step + 1))
    time.sleep(0.4)
print("giving up now", flush=True)
sys.exit(3)
"""

# The agent does not fetch and unpack code snapshots yet (reported to the lead), so the command
# is self-contained; the snapshot is still uploaded and recorded in the run's lineage.
INLINE_FAILING = ("python -c \"import sys, time; [(print(f'custom line {i}', flush=True), time.sleep(0.4)) for i in range(4)]; "
                  "print('giving up now', flush=True); sys.exit(3)\"")


def login(cli: Cli, stack: LiveStack, user: str = "alice") -> None:
    done = cli("login", "--server", stack.url, "--username", user, "--password-stdin", stdin="trainyard-demo\n")
    assert done.returncode == 0, done.stderr


def read_json(cli: Cli, *args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, f"{args}: rc={done.returncode} {done.stderr}"
    return json.loads(done.stdout)


def test_login_stores_a_private_config_and_errors_are_human(cli_stack: LiveStack, cli: Cli) -> None:
    not_yet = cli("runs")
    assert not_yet.returncode == 3
    assert "not logged in" in not_yet.stderr and "trainyard login --server" in not_yet.stderr

    wrong = cli("login", "--server", cli_stack.url, "--username", "alice", "--password-stdin", stdin="nope\n")
    assert wrong.returncode == 3, wrong.stderr
    assert "Wrong username or password" in wrong.stderr

    login(cli, cli_stack)
    path = cli.home / ".config" / "trainyard" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = json.loads(path.read_text())
    assert config["server"] == cli_stack.url and config["token"].startswith("ty_")

    missing = cli("show", "999999")
    assert missing.returncode == 4 and missing.stderr.startswith("error: ")
    bad = cli("runs", "--status", "sleeping")
    assert bad.returncode == 6 and "status" in bad.stderr
    usage = cli("submit", "--project", "vision/digits", "--param", "oops")
    assert usage.returncode == 2
    refused = cli("submit", "digits-classifier", "--project", "vision/digits", "--param", "steps=-5", *TAGS)
    assert refused.returncode == 6 and "steps" in refused.stderr

    # The environment overrides the file: a bad token is an auth error, not a crash.
    env_cli = Cli(cli.home)
    env = env_cli.env | {"TRAINYARD_TOKEN": "ty_not-a-real-token"}
    revoked = subprocess.run(env_cli.argv("runs"), capture_output=True, text=True, env=env, timeout=60)
    assert revoked.returncode == 3, revoked.stderr

    # Logging out revokes the token on the server too: a copy of the file no longer works.
    saved = path.read_text()
    out = cli("logout")
    assert out.returncode == 0 and f"revoked the token on {cli_stack.url}" in out.stderr, out.stderr
    assert not path.exists()
    path.write_text(saved)
    stale = cli("runs")
    assert stale.returncode == 3, stale.stderr
    path.unlink()


def test_submit_wait_reads_and_compare(cli_stack: LiveStack, cli: Cli) -> None:
    login(cli, cli_stack)
    params = [f"--param={k}={v}" for k, v in SMALL.items()]
    # --dry-run asks the scheduler when the run would start, and queues nothing.
    dry = cli("submit", "digits-classifier", "--project", "vision/digits", *params, *TAGS, "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("Would "), dry.stdout + dry.stderr
    assert read_json(cli, "runs", "--project", "vision/digits", "--tag", "family=cli") == []
    forecast = read_json(cli, "submit", "digits-classifier", "--project", "vision/digits", *params, *TAGS, "--priority", "urgent",
                         "--dry-run")
    assert forecast["pool"] == "local" and "estimated_start" in forecast and forecast["summary"].startswith("Would ")
    bad = cli("submit", "digits-classifier", "--project", "vision/digits", "--param", "steps=0", "--dry-run")
    assert bad.returncode != 0 and "params.steps" in bad.stderr, bad.stderr
    done = cli("submit", "digits-classifier", "--project", "vision/digits", *params, *TAGS, "--name", "cli small",
               "--wait", "--poll", "0.5", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted run" in done.stderr
    steps = SMALL["steps"]
    assert f"/{steps} steps" in done.stderr and "steps/s" in done.stderr, done.stderr  # the progress bar with a rate
    assert "ETA" in done.stderr or f"{steps}/{steps}" in done.stderr
    assert "succeeded" in done.stdout and "METRIC" in done.stdout, done.stdout
    first = int(done.stderr.split("submitted run ")[1].split(":")[0])

    # A second run without --wait, to compare against.
    second = read_json(cli, "submit", "digits-classifier", "--project", "vision/digits", *params, "--param", "lr=0.01",
                       *TAGS)
    assert second["params"]["lr"] == 0.01 and second["params"]["steps"] == steps
    cli_stack.wait_for(lambda: read_json(cli, "show", str(second["id"]))["status"] == "succeeded", 180, "second run")

    runs = read_json(cli, "runs", "--project", "vision/digits", "--tag", "family=cli", "--status", "succeeded")
    assert {first, second["id"]} <= {r["id"] for r in runs}
    assert read_json(cli, "show", str(first))["status"] == "succeeded"
    keys = read_json(cli, "keys", str(first))
    key = keys["keys"][0]["key"]
    series = read_json(cli, "metrics", str(first), key)
    assert series["series"][0]["count"] > 0
    assert isinstance(read_json(cli, "checkpoints", str(first)), list)
    assert "chunks" in read_json(cli, "logs", str(first))
    assert read_json(cli, "templates")
    assert read_json(cli, "nodes")["nodes"]
    assert read_json(cli, "budget", "vision/digits")["project"]["full_slug"] == "vision/digits"
    assert "local" in [p["pool"] for p in read_json(cli, "queue")["pools"]]
    queue = cli("queue", "--pool", "local")
    assert queue.returncode == 0 and queue.stdout.startswith("pool local: "), queue.stdout + queue.stderr

    compared = read_json(cli, "compare", str(first), str(second["id"]))
    assert [r["id"] for r in compared["runs"]] == [first, second["id"]]
    table = cli("compare", str(first), str(second["id"]))
    assert table.returncode == 0, table.stderr
    assert "param lr *" in table.stdout and f"RUN {first}" in table.stdout and "(last)" in table.stdout, table.stdout
    opened = cli("compare", str(first), str(second["id"]), "--open")
    assert opened.stdout.strip() == f"{cli_stack.url}/compare/?runs={first},{second['id']}"
    assert cli("runs").returncode == 0 and cli("show", str(first)).returncode == 0


def test_failing_custom_code_and_logs_follow(cli_stack: LiveStack, cli: Cli, tmp_path: Path) -> None:
    login(cli, cli_stack)
    code = tmp_path / "code"
    (code / "__pycache__").mkdir(parents=True)
    (code / "train.py").write_text(FAILING)
    (code / "__pycache__" / "junk.pyc").write_bytes(b"\0" * 10)
    commit = ""
    if shutil.which("git"):
        git = ["git", "-C", str(code), "-c", "user.name=t", "-c", "user.email=t@example.com"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "train.py"], check=True)
        subprocess.run([*git, "commit", "-qm", "x"], check=True)
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    # Webhooks for the run's end: a receiver that works, and one that fails twice first.
    token = cli_stack.token("alice")
    good, flaky = Receiver(), Receiver(fail_first=2)
    hooks = [cli_stack.api("POST", "/api/v1/webhooks/", {"project": "vision/digits", "url": r.url, "events": ["run.failed"]},
                           token=token, expect=201) for r in (good, flaky)]

    waiting = cli.popen("submit", "--project", "vision/digits", "--code", str(code), "--command", INLINE_FAILING, *TAGS,
                        "--wait", "--poll", "0.5")

    def submitted() -> int | None:
        runs = read_json(cli, "runs", "--template", "custom", "--tag", "family=cli", "--limit", "1")
        return runs[0]["id"] if runs else None

    run_id = cli_stack.wait_for(submitted, 60, "the custom run to be submitted")
    follow = cli.popen("logs", str(run_id), "--follow", "--poll", "0.5")
    try:
        out, err = waiting.communicate(timeout=180)
        follow_out, follow_err = follow.communicate(timeout=60)
    finally:
        waiting.kill()
        follow.kill()
    assert waiting.returncode == 1, out + err
    assert "failed" in out and "exit code 3" in out, out
    assert follow.returncode == 1, follow_out + follow_err
    for line in ("custom line 0", "custom line 3", "giving up now"):
        assert line in follow_out, follow_out
    assert f"run {run_id} failed" in follow_err

    detail = read_json(cli, "show", str(run_id))
    assert detail["status"] == "failed"
    if commit:
        assert detail["lineage"]["code_snapshot"]["git_commit"] == commit
    try:
        cli_stack.wait_for(lambda: good.received and len(flaky.received) == 1, 30, "both webhooks delivered")
        time.sleep(1.5)  # a duplicate would arrive by now
    finally:
        good.close()
        flaky.close()
    assert len(good.received) == 1 and flaky.attempts == 3
    event = good.received[0]
    assert webhook_verify(secret=hooks[0]["secret"], timestamp=event.headers["x-trainyard-timestamp"], body=event.body,
                          signature=event.headers["x-trainyard-signature"])
    assert event.json["type"] == "run.failed" and event.json["data"]["run"]["id"] == run_id
    log = cli_stack.api("GET", f"/api/v1/webhook-deliveries/?endpoint={hooks[1]['id']}", token=token)["results"]
    assert [(d["status"], d["attempts"], d["event_type"]) for d in log] == [("succeeded", 3, "run.failed")]

    # Streaming JSON: one object per line.
    lines = cli("logs", str(run_id), "--follow", "--json", "--poll", "0.2").stdout.splitlines()
    assert lines and all(json.loads(line)["text"] is not None for line in lines)
    started = time.monotonic()
    assert cli("cancel", str(run_id)).returncode == 6  # already finished: a state conflict, refused
    assert time.monotonic() - started < 30
