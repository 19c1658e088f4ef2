"""Issue 26, acceptance 1, live: two gunicorn web servers on different ports share one database
(SQLite file, or PostgreSQL when DATABASE_URL is set) and one S3 server (moto's, over HTTP).

- A checkpoint an agent uploads through web A (presigned, straight to the store: web A's
  access log shows no PUT) is downloaded through web B by the next attempt's agent, which
  resumes from it; no web host keeps a file.
The p99 of the web's other requests during a 200 MB upload is a figure, not a test: it is
measured by bench/storage_upload.py (`make bench`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.helpers import kill9, start_agent, submit, wait_status, write
from tests.fixtures.live import PYTHON, LiveStack
from tests.fixtures.services import free_port, wait_for_port
from tests.storage.conftest import S3Server

pytestmark = [pytest.mark.live, pytest.mark.process]

MiB = 1024 * 1024
A = "/api/v1/agent/"

# Checkpoints of 7 MiB (two parts of the 5 MiB the stack is set to), whose bytes the resumed
# attempt checks: it must get exactly what attempt 1 wrote. Attempt 1 crawls after its step-9
# checkpoint (it dies with its agent, killed long before step 19), so step 9 is the one resumed.
RESUMABLE = """
import hashlib, os, time, trainyard
def state(step):
    return hashlib.sha256(b"%d" % step).digest() * (7 * 1024 * 1024 // 32)
start = 0
ckpt = trainyard.latest_checkpoint()
if ckpt is not None:
    data = open(ckpt.path, "rb").read()
    assert data == state(ckpt.step), "the resumed checkpoint differs from the one written"
    start = ckpt.step + 1
    print(f"resumed from step {ckpt.step} with {len(data)} bytes intact", flush=True)
trainyard.set_total_steps(30)
for step in range(start, 30):
    trainyard.log(step, loss=1.0 / (step + 1))
    if step % 10 == 9:
        with trainyard.checkpoint(step) as path:
            open(path, "wb").write(state(step))
    time.sleep(0.3 if step < 10 else 6.0 if start == 0 else 0.05)
"""


def gunicorn(stack: LiveStack, name: str, port: int) -> None:
    """A web host as production runs it, with its access log in <name>.log."""
    stack.spawn(name, [PYTHON, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", "2",
                       "--threads", "4", "--timeout", "120", "--graceful-timeout", "5", "--access-logfile", "-"])
    wait_for_port(port, 60)


@pytest.fixture
def two_webs(tmp_path: Path, redis_url: str, s3_server: S3Server) -> Iterator[tuple[LiveStack, str]]:
    """(stack, web B's URL): web A is the stack's own URL."""
    stack = LiveStack(tmp_path, redis_url)
    stack.env.update(s3_server.env(s3_server.bucket()))
    try:
        gunicorn(stack, "web", stack.port)
        other = free_port()
        gunicorn(stack, "web-b", other)
        yield stack, f"http://127.0.0.1:{other}"
    finally:
        stack.close()


def agent_at(stack: LiveStack, name: str, server: str) -> None:
    """An agent that talks to `server` (start_agent's defaults, another web host)."""
    url = stack.url
    stack.url = server
    try:
        start_agent(stack, name)
    finally:
        stack.url = url


def access(stack: LiveStack, name: str) -> list[str]:
    """The request lines of a web host's access log ("METHOD /path HTTP/1.1")."""
    return re.findall(r'"([A-Z]+ \S+ HTTP/[0-9.]+)"', stack.log(name))


def test_checkpoint_uploaded_through_one_web_resumes_through_the_other(two_webs: tuple[LiveStack, str], tmp_path: Path,
                                                                        s3_server: S3Server) -> None:
    stack, web_b = two_webs
    stack.start_worker()
    start_agent(stack, "node-a")
    agent_a = stack.procs["node-a"]
    run = submit(stack, f"python {write(tmp_path / 'job.py', RESUMABLE)}")
    wait_status(stack, run, {"running"}, 60)
    stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != ''",
                                       (run,))[0][0], 60, "a checkpoint stored (checked by the server)")
    kill9(agent_a)
    stack.wait_for(lambda: stack.query("SELECT status FROM runs_attempt WHERE run_id=? AND number=1", (run,))[0][0] == "lost",
                   30, "attempt 1 to be lost")
    agent_at(stack, "node-b", web_b)  # another node (no local copy), another web host
    final = wait_status(stack, run, {"succeeded", "failed"}, 90)
    assert final["status"] == "succeeded", final
    logs = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run,)))
    assert "resumed from step 9 with 7340032 bytes intact" in logs, logs[-2000:]
    [(ckpt_id, key)] = stack.query("SELECT id, stored_path FROM runs_checkpoint WHERE run_id=? AND step=9", (run,))

    a_lines, b_lines = access(stack, "web"), access(stack, "web-b")
    assert f"POST {A}checkpoints/{ckpt_id}/complete/ HTTP/1.1" in a_lines
    assert not [line for line in a_lines + b_lines if line.startswith("PUT ")], "checkpoint bytes went through a web host"
    assert f"GET {A}checkpoints/{ckpt_id}/download/ HTTP/1.1" in b_lines
    assert not [line for line in a_lines + b_lines if "/file/" in line or "/storage/object/" in line]
    store_lines = s3_server.log.read_text()
    assert re.search(rf"PUT /\S+/{re.escape(key)}\?\S*partNumber=2", store_lines), "the parts went to the store"
    assert re.search(rf"GET /\S+/{re.escape(key)}\?", store_lines), "the download came from the store"
    # Nothing under either web host's media folder: the store holds it all.
    assert not list((stack.workdir / "var").rglob("*.pt"))
