"""Acceptance 3: a secret set on a project reaches the job that asks for it, and nothing else.

A real stack (gunicorn, Celery, an agent subprocess) runs a tiny job that proves it saw the
right value (it logs a metric saying whether the sha256 of what it got matches) and then tries
hard to leak it: it prints it to stdout and stderr, split over two writes, URL-quoted, and puts
it in its lineage. Then the test looks everywhere it can: every API response it can GET for the
run and the project, the HTML pages (run, project, secrets, logs), every row of every table of
the live database, every file under the test's directory (the agent's workdir with the job's
run directory and the agent's spool, the server's media, every process log, the SQLite files),
and the logs and lineage as shipped. The plaintext appears in none of them; the shipped log says
``[redacted:TY_ACCEPT_TOKEN]`` where the job printed it.
"""

from __future__ import annotations

import hashlib
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import make_stack, wait_status

pytestmark = pytest.mark.live

NAME = "TY_ACCEPT_TOKEN"

JOB = """
import hashlib, os, sys, time, urllib.parse, trainyard
value = os.environ.get("TY_ACCEPT_TOKEN", "")
ok = hashlib.sha256(value.encode()).hexdigest() == sys.argv[1]
trainyard.log(0, secret_ok=1.0 if ok else 0.0, secret_len=float(len(value)))
print("the token is", value, flush=True)
sys.stdout.write("split: " + value[:7]); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write(value[7:] + " end\\n"); sys.stdout.flush()
print("quoted:", urllib.parse.quote(value, safe=""), file=sys.stderr, flush=True)
trainyard.record_lineage(api_token=value)
print("done", flush=True)
"""

TEMPLATE = """
from apps.jobtemplates.recipes import LOCAL_RESOURCES
from apps.jobtemplates.services import template_create
template_create(slug="secret-probe", publish=True, title="Secret probe", kind="train", entrypoint={entrypoint!r},
                param_schema={{"type": "object", "properties": {{}}}}, resources=dict(LOCAL_RESOURCES),
                checkpoint_policy={{}}, max_restarts=0, environment={{"secrets": ["{name}"]}})
"""



def _fetch(opener: urllib.request.OpenerDirector, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _tables(stack: LiveStack) -> list[str]:
    if stack.db_url:
        return [t for (t,) in stack.query("SELECT table_name FROM information_schema.tables WHERE table_schema='public'")]
    return [t for (t,) in stack.query("SELECT name FROM sqlite_master WHERE type='table'")]


def test_secret_reaches_the_job_and_nowhere_else(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    value = "tysec-" + secrets.token_hex(20)
    forms = {value.encode(), urllib.parse.quote(value, safe="").encode()}
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=30)
    try:
        stack.start_web()
        stack.start_worker()
        start_agent(stack, "node-a")
        job = tmp_path / "probe.py"
        job.write_text(JOB)
        digest = hashlib.sha256(value.encode()).hexdigest()
        stack.manage("shell", "-c", TEMPLATE.format(entrypoint=f"python {job} {digest}", name=NAME))
        alice, admin = stack.token("alice"), stack.token("admin")
        project = next(p for p in stack.api("GET", "/api/v1/projects/", token=alice)["results"] if p["full_slug"] == "vision/digits")
        stack.api("POST", f"/api/v1/projects/{project['id']}/secrets/", {"name": NAME, "value": value}, token=alice, expect=201)

        tags = {"task": "probe", "dataset": "none", "candidate": "baseline", "family": "secrets"}
        run = stack.api("POST", "/api/v1/runs/", {"project": "vision/digits", "template": "secret-probe", "params": {}, "tags": tags,
                                                  "secrets": [NAME]}, token=alice, expect=201)
        assert wait_status(stack, run["id"], {"succeeded", "failed", "cancelled"}, 120) == "succeeded"
        run_id = run["id"]

        # The job saw exactly the value that was set.
        metrics = stack.wait_for(lambda: stack.query("SELECT key, value FROM tracking_metricpoint WHERE run_id=?", (run_id,)), 20,
                                 "the job's metrics")
        assert dict(metrics) == {"secret_ok": 1.0, "secret_len": float(len(value))}
        shipped = stack.wait_for(lambda: "".join(t for (t,) in stack.query(
            "SELECT text FROM runs_logchunk WHERE run_id=? ORDER BY stream, seq", (run_id,))) if "done" in "".join(
            t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run_id,))) else "", 20, "the shipped logs")
        assert f"the token is [redacted:{NAME}]" in shipped and f"split: [redacted:{NAME}] end" in shipped
        assert f"quoted: [redacted:{NAME}]" in shipped

        leaks: list[str] = []

        def check(where: str, data: bytes) -> None:
            found = [f for f in forms if f in data]
            if found:
                leaks.append(where)

        # Every API response about the run and the project, as its owner and as the superuser.
        pid = project["id"]
        api_paths = [f"/api/v1/runs/{run_id}/", "/api/v1/runs/", f"/api/v1/runs/{run_id}/logs/", f"/api/v1/runs/{run_id}/metrics/",
                     f"/api/v1/runs/{run_id}/metrics/?key=secret_ok", f"/api/v1/runs/{run_id}/metrics/keys/",
                     f"/api/v1/runs/{run_id}/checkpoints/", f"/api/v1/runs/{run_id}/energy/", f"/api/v1/compare/?runs={run_id}",
                     "/api/v1/projects/", f"/api/v1/projects/{pid}/", f"/api/v1/projects/{pid}/budget/",
                     f"/api/v1/projects/{pid}/secrets/", f"/api/v1/projects/{pid}/secrets/{NAME}/", "/api/v1/templates/",
                     "/api/v1/templates/secret-probe/", "/api/v1/nodes/", "/api/v1/audit/", "/api/v1/audit/?page_size=500",
                     "/api/v1/queue/", "/api/schema/"]
        plain = urllib.request.build_opener()
        fetched = 0
        for token in (alice, admin):
            for api_path in api_paths:
                code, body = _fetch(plain, stack.url + api_path, {"Authorization": f"Token {token}", "Accept": "application/json"})
                fetched += code == 200
                check(f"GET {api_path} -> {code}", body)
        assert fetched >= 20, "most of the API answered: the grep above is not vacuous"
        # The HTML pages: run, its logs, the project, its secrets page, lists and the audit log.
        for username in ("alice", "admin"):
            browser = stack.browser(username)
            for page in [f"/runs/{run_id}/", f"/runs/{run_id}/logs/", "/runs/", f"/projects/{pid}/", f"/projects/{pid}/secrets/",
                         "/projects/", f"/compare/?runs={run_id}", "/audit/", "/nodes/", "/budgets/", "/"]:
                code, body = _fetch(browser, stack.url + page)
                check(f"page {page} as {username} -> {code}", body)
        # Every row of every table of the live database (the vault's row holds only ciphertext).
        vault_rows = stack.query("SELECT ciphertext FROM vault_secret")
        assert len(vault_rows) == 1 and value not in vault_rows[0][0]
        for table in _tables(stack):
            for row in stack.query(f'SELECT * FROM "{table}"'):
                check(f"table {table}", repr(row).encode())
        # Every file: the agent's workdir (the job's logs as the agent wrote them, its spool and
        # state), media, every process log, the SQLite files. Except what the job itself wrote in
        # its run directory (job/events.jsonl holds the lineage it was told to record): the job
        # has the value in its environment and may write it anywhere it likes; what matters is
        # that nothing the agent ships or keeps carries it.
        files = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "job"]
        assert any("agent-node-a" in str(p) and p.name.endswith(".stdout.log") for p in files)
        for path in files:
            check(f"file {path.relative_to(tmp_path)}", path.read_bytes())
        lineage = stack.query("SELECT lineage FROM runs_attempt WHERE run_id=?", (run_id,))[0][0]
        assert f"[redacted:{NAME}]" in str(lineage), "the lineage the job recorded arrived, redacted"
        assert not leaks, "the secret's plaintext appears in:\n  " + "\n  ".join(leaks)
    finally:
        stack.close()
