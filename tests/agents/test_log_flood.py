"""Issue 27, part 1: a job that floods its output must not wedge its node.

The agent keeps every upload under the server's body limit, caps and samples a runaway log
(the head and the tail are kept, with a note of what was dropped), and never lets one failing
upload hold back other reports. Unit tests for the parts; live tests with real processes.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from agents import protocol
from agents.client import Client
from agents.logcap import LogCap, LogLimits
from agents.shipper import Shipper, Spool, Tail, lane, log_batches
from tests.agents.helpers import start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

A = protocol.API_PREFIX


def _tail(tmp_path: Path, attempt_id: int = 7) -> Tail:
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir(exist_ok=True)
    return Tail(attempt_id=attempt_id, number=1, rank=0, run_dir=tmp_path, checkpoint_dir=tmp_path, log_dir=agent_dir,
                state_path=agent_dir / "ship-state.json", ranks=[0])


def _bodies(spool: Spool) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())["body"] for p in spool.items()]


def _encoded(body: Any) -> int:
    return len(json.dumps(body, separators=(",", ":"), allow_nan=False).encode())  # as agents.client sends it


# --- the body limit --------------------------------------------------------------------------
def test_the_protocol_states_the_servers_limit() -> None:
    assert protocol.MAX_BODY_BYTES <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE


@pytest.mark.parametrize("line", [b"x" * 99 + b"\n", b"\x01\xff\"\\" * 2000 + b"\n", "ü€😀".encode() * 3000 + b"\n"],
                         ids=["ascii", "escaped-and-invalid", "multibyte"])
def test_every_log_batch_is_under_the_servers_limit(tmp_path: Path, line: bytes) -> None:
    """8 MB of output, uncapped here, in the shapes that grow most when encoded."""
    tail = _tail(tmp_path)
    (tail.log_dir / "rank0.stdout.log").write_bytes(line * (8_000_000 // len(line)))
    spool = Spool(tmp_path / "spool", 1 << 30)
    shipper = Shipper(None, spool, interval=1.0, on_stale=lambda a, w: None,  # type: ignore[arg-type]
                      log_limits=LogLimits(head_bytes=1 << 40))
    shipper._tail_log(tail, 0, "stdout", final=True)
    bodies = _bodies(spool)
    assert len(bodies) > 3
    assert max(_encoded(b) for b in bodies) <= protocol.MAX_BODY_BYTES
    chunks = [c for b in bodies for c in b["chunks"]]
    assert all(len(c["text"]) <= protocol.MAX_LOG_CHUNK_BYTES for c in chunks)
    assert all(len(b["chunks"]) <= protocol.MAX_LOG_CHUNKS for b in bodies)
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    if line[:1] != b"\x01":  # valid UTF-8 comes back whole, however it was cut
        assert "".join(c["text"] for c in chunks).encode() == (tail.log_dir / "rank0.stdout.log").read_bytes()


def test_a_batch_spooled_before_the_limit_goes_in_parts() -> None:
    chunks: list[protocol.LogChunkMsg] = [{"rank": 0, "seq": i, "stream": "stdout", "text": "y" * 32768} for i in range(200)]
    assert _encoded({"attempt_id": 1, "number": 1, "chunks": chunks}) > protocol.MAX_BODY_BYTES  # what 0.1.0 spooled
    parts = log_batches(1, 1, chunks)
    assert [c for p in parts for c in p["chunks"]] == chunks
    assert max(_encoded(p) for p in parts) <= protocol.MAX_BODY_BYTES


def test_the_client_refuses_a_body_over_the_limit_as_a_413() -> None:
    from agents.client import ApiError

    with pytest.raises(ApiError) as caught:
        Client("http://127.0.0.1:9").request("POST", A + "logs/", {"text": "z" * protocol.MAX_BODY_BYTES})
    assert caught.value.status == 413 and caught.value.code == "too_large"


# --- the cap -------------------------------------------------------------------------------------
def _flood(path: Path, lines: int, start: int = 0) -> None:
    """Lines of 100 bytes, numbered from start + 1."""
    with open(path, "ab") as fh:
        fh.write(b"".join(f"{i:08d} ".encode() + b"x" * 90 + b"\n" for i in range(start + 1, start + lines + 1)))


def _text(pieces: list[bytes | str]) -> str:
    return "".join(p.decode() if isinstance(p, bytes) else p for p in pieces)


def test_a_flood_keeps_the_head_and_the_tail_and_says_what_it_dropped(tmp_path: Path) -> None:
    path = tmp_path / "rank0.stdout.log"
    _flood(path, 80_000)  # 8 MB
    cap = LogCap()
    text = _text(cap.take(path, final=True, now=100.0, limits=LogLimits(), label="rank 0 stdout"))
    assert len(text) < 2_200_000
    lines = text.splitlines()
    notes = [line for line in lines if line.startswith("[trainyard:")]
    assert len(notes) == 1
    kept = [int(line[:8]) for line in lines if not line.startswith("[trainyard:")]
    head = [n for n in kept if n < 40_000]
    tail = [n for n in kept if n >= 40_000]
    assert head == list(range(1, len(head) + 1)) and len(head) * 100 >= 1_000_000 - 100
    assert tail == list(range(80_001 - len(tail), 80_001)) and len(tail) * 100 >= 1_000_000 - 100
    first, last = len(head) + 1, 80_000 - len(tail)
    dropped = (last - first + 1) * 100
    assert notes[0] == (f"[trainyard: {dropped / 1e6:.1f} MB of output dropped from rank 0 stdout "
                        f"(lines {first:,}-{last:,}); the head and the tail are kept]")
    assert cap.dropped_bytes == dropped and cap.offset == path.stat().st_size


def test_a_long_flood_is_sampled_and_a_quiet_job_is_not_capped(tmp_path: Path) -> None:
    path = tmp_path / "rank0.stdout.log"
    limits = LogLimits(head_bytes=10_000, tail_bytes=20_000, rate_bytes_s=1_000, burst_bytes=5_000)
    cap = LogCap()
    shipped: list[bytes | str] = []
    now = 0.0
    for i in range(60):  # a minute of 100 kB/s
        _flood(path, 1000, start=i * 1000)
        now += 1.0
        shipped += cap.take(path, final=False, now=now, limits=limits, label="rank 0 stdout")
        size = path.stat().st_size
        assert size - cap.offset <= limits.tail_bytes + 100, "undecided output stays within the tail"
    notes = [p for p in shipped if isinstance(p, str)]
    assert 8 <= len(notes) <= 13, "a sample of the newest lines every burst / rate seconds"
    assert sum(len(p) for p in shipped if isinstance(p, bytes)) <= limits.head_bytes + now * limits.rate_bytes_s + limits.burst_bytes
    shipped += cap.take(path, final=True, now=now, limits=limits, label="rank 0 stdout")
    assert cap.offset == path.stat().st_size
    assert _text(shipped).endswith(f"{60_000:08d} " + "x" * 90 + "\n"), "the last line is kept"
    # Once the flood is over, output at the sustained rate goes out whole again.
    quiet = tmp_path / "quiet.log"
    cap = LogCap()
    got: list[bytes | str] = []
    for i in range(100):
        _flood(quiet, 5, start=i * 5)  # 500 B/s
        got += cap.take(quiet, final=False, now=float(i), limits=limits, label="rank 0 stdout")
    assert _text(got) == quiet.read_text()


def test_the_cap_survives_a_restart_of_the_agent(tmp_path: Path) -> None:
    tail = _tail(tmp_path)
    _flood(tail.log_dir / "rank0.stdout.log", 30_000)
    spool = Spool(tmp_path / "spool", 1 << 30)
    shipper = Shipper(None, spool, interval=1.0, on_stale=lambda a, w: None)  # type: ignore[arg-type]
    shipper.add(tail)
    shipper._tail(tail, final=False)
    again = _tail(tmp_path)
    shipper.add(again)
    _flood(again.log_dir / "rank0.stdout.log", 30_000, start=30_000)
    shipper._tail(again, final=True)
    chunks = [c for b in _bodies(spool) for c in b["chunks"]]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    [note] = [c["text"] for c in chunks if c["stream"] == "agent"]
    assert "dropped from rank 0 stdout" in note
    assert sum(len(c["text"]) for c in chunks if c["stream"] == "stdout") < 2_200_000


# --- the sender ------------------------------------------------------------------------------
class _Stub(BaseHTTPRequestHandler):
    """The agent protocol's log endpoint as a broken server would answer it; the rest say ok."""

    answers: dict[str, int] = {}
    seen: list[str] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append(self.path)
        status = self.answers.get(self.path, 200)
        if status == 0:  # no answer at all: the connection breaks
            self.close_connection = True
            self.connection.shutdown(2)
            return
        body = json.dumps({"ok": True} if status < 400 else {"error": {"status": status, "code": "x", "message": "no"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def stub() -> Iterator[tuple[str, type[_Stub]]]:
    handler = type("Stub", (_Stub,), {"answers": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def _spool_flood_then_exit(spool: Spool) -> None:
    batch = {"attempt_id": 7, "number": 1, "chunks": [{"rank": 0, "seq": 1, "stream": "stdout", "text": "hi\n"}]}
    for _ in range(3):
        spool.put("logs", {"path": A + "logs/", "attempt_id": 7, "body": batch})
    spool.put("event", {"path": A + "events/", "attempt_id": 7,
                        "body": {"attempt_id": 7, "number": 1, "node_rank": 0, "event": "exited", "exit_code": 0, "time": 0.0}})


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_refused_upload_is_dropped_with_a_log_line_and_the_exit_still_goes(
        stub: tuple[str, type[_Stub]], tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int) -> None:
    url, handler = stub
    handler.answers[A + "logs/"] = status
    spool = Spool(tmp_path / "spool", 1 << 20)
    shipper = Shipper(Client(url, backoff_base=0.01, backoff_max=0.05), spool, interval=0.2, on_stale=lambda a, w: None, retry_for=0.5)
    _spool_flood_then_exit(spool)
    with caplog.at_level(logging.ERROR, logger="agents.shipper"):
        shipper.start()
        try:
            deadline = time.monotonic() + 10
            while spool.items() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not spool.items()
        finally:
            shipper.close(flush_timeout=0)
    assert handler.seen.count(A + "logs/") == 3, "each tried once, not again"
    assert handler.seen.count(A + "events/") == 1
    assert sum("server refused a logs batch, dropping it" in r.getMessage() for r in caplog.records) == 3


def test_a_failing_upload_does_not_hold_back_the_exit_and_is_dropped_after_its_strikes(
        stub: tuple[str, type[_Stub]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    url, handler = stub
    handler.answers[A + "logs/"] = 0  # the connection breaks, as a body over the limit once made it
    monkeypatch.setattr("agents.shipper.STRIKE_BACKOFF_S", 0.05)
    spool = Spool(tmp_path / "spool", 1 << 20)
    client = Client(url, backoff_base=0.01, backoff_max=0.05)
    shipper = Shipper(client, spool, interval=0.2, on_stale=lambda a, w: None, retry_for=0.2)
    _spool_flood_then_exit(spool)
    logs_lane = lane(spool.items()[0])
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents.shipper"):
        shipper.start()
        try:
            while A + "events/" not in handler.seen and time.monotonic() - started < 10:
                time.sleep(0.05)
            exit_after = time.monotonic() - started
            deadline = time.monotonic() + 30
            while spool.items() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not spool.items()
        finally:
            shipper.close(flush_timeout=0)
    assert exit_after < 1.5, "the exit went out after one try of the log upload, not behind it"
    assert logs_lane == ("logs", "7")
    dropped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dropping a logs report")]
    assert len(dropped) == 3 and all("failed 5 times while the server answered others" in m for m in dropped)


def test_a_struck_item_keeps_its_strikes_across_a_restart(stub: tuple[str, type[_Stub]], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    url, handler = stub
    handler.answers[A + "logs/"] = 500
    monkeypatch.setattr("agents.shipper.STRIKE_BACKOFF_S", 0.02)
    spool = Spool(tmp_path / "spool", 1 << 20)
    _spool_flood_then_exit(spool)
    shipper = Shipper(Client(url, backoff_base=0.01, backoff_max=0.05), spool, interval=0.2, on_stale=lambda a, w: None,
                      retry_for=0.2)
    for _ in range(2):
        shipper._send_round(spool.items())
        time.sleep(0.05)
    assert [json.loads(p.read_text()).get("strikes") for p in spool.items()] == [2, None, None], "the exit went"
    client = Client(url, backoff_base=0.01, backoff_max=0.05)
    client.request("POST", A + "register/", {})  # the restarted agent registers: the server is there
    restarted = Shipper(client, Spool(tmp_path / "spool", 1 << 20), interval=0.2, on_stale=lambda a, w: None, retry_for=0.2)
    deadline = time.monotonic() + 12
    while restarted.spool.items() and time.monotonic() < deadline:
        restarted._send_round(restarted.spool.items())
        time.sleep(0.02)
    assert restarted.spool.items() == []
    assert restarted.spool.bytes == 0
    handler.seen.clear()
    restarted._send_round(restarted.spool.items())
    assert handler.seen == []


def test_a_server_that_is_away_strikes_nothing(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    _spool_flood_then_exit(spool)
    shipper = Shipper(Client("http://127.0.0.1:9", backoff_base=0.01, backoff_max=0.05), spool, interval=0.2,
                      on_stale=lambda a, w: None, retry_for=0.5)
    for _ in range(3):
        assert shipper._send_round(spool.items()) is False
    assert len(spool.items()) == 4 and all("strikes" not in json.loads(p.read_text()) for p in spool.items())



# --- live: a real agent, server, worker and jobs ------------------------------------------------
# Numbered 100-byte lines, then the time the job ended (for how long its exit took to arrive).
FLOOD = """
import os, sys, time
lines, width = int(sys.argv[1]), int(sys.argv[2])
pad = b"x" * (width - 10) + b"\\n"
out = sys.stdout.buffer
for i in range(1, lines + 1):
    out.write(b"%08d " % i + pad)
out.flush()
print("flood over", file=sys.stderr, flush=True)
open(os.path.join(os.environ["TRAINYARD_RUN_DIR"], "ended"), "w").write(repr(time.time()))
"""

# Floods until stopped: about 20 MB/s.
ENDLESS = """
import sys, time
out = sys.stdout.buffer
line = b"y" * 1023 + b"\\n"
while True:
    out.write(line * 2000)
    time.sleep(0.1)
"""



def _logs(stack: LiveStack, run: int, token: str) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    after = 0
    while True:
        page = stack.api("GET", f"/api/v1/runs/{run}/logs/?after={after}&limit=1000", token=token)
        chunks += page["chunks"]
        after = page["next"]
        if not page["more"]:
            return chunks


def _finish_flood(stack: LiveStack, tmp_path: Path, lines: int, width: int, timeout: float) -> tuple[int, float]:
    """Run a flood to its end; the run id and how long after the job's end its run succeeded."""
    run = submit(stack, f"python {write(tmp_path / 'flood.py', FLOOD)} {lines} {width}")
    ended_file = stack.wait_for(lambda: next((stack.workdir / "agent-node-a" / "runs").glob(f"{run}/*/job/ended"), None), timeout,
                                "the flood to end")
    row = wait_status(stack, run, {"succeeded", "failed", "cancelled"}, 30)
    seen = time.time()
    assert row["status"] == "succeeded", row
    return run, seen - float(ended_file.read_text())


def _assert_kept_with_a_note(stack: LiveStack, run: int, lines: int, width: int) -> list[dict[str, Any]]:
    alice = stack.token("alice")
    chunks = stack.wait_for(lambda: (c := _logs(stack, run, alice)) and "flood over" in "".join(x["text"] for x in c) and c, 30,
                            "the log's tail, after the exit")
    out = "".join(c["text"] for c in chunks if c["stream"] == "stdout")
    numbers = [int(line[:8]) for line in out.splitlines()]
    [note] = [c["text"] for c in chunks if c["stream"] == "agent"]
    first, last = (int(n.replace(",", "")) for n in re.findall(r"lines ([\d,]+)-([\d,]+)", note)[0])
    assert numbers == [*range(1, first), *range(last + 1, lines + 1)], "the head and the tail, nothing else, nothing twice"
    assert first * width >= 1_000_000 - width and (lines - last) * width >= 1_000_000 - width
    assert f"{(last - first + 1) * width / 1e6:.1f} MB of output dropped from rank 0 stdout" in note
    assert len(out) < 2_200_000
    # The run page says so above the log (whose start a long log scrolls away).
    page = stack.browser("alice").open(f"{stack.url}/runs/{run}/", timeout=30).read().decode()
    notes = re.search(r'<div id="log-notes" class="log-notes">(.*?)</div>', page, re.S)
    assert notes is not None and f"lines {first:,}-{last:,}" in notes.group(1), page[-3000:]
    return chunks


@pytest.fixture
def stack(live_stack: LiveStack) -> LiveStack:
    live_stack.start_worker()
    start_agent(live_stack, "node-a")
    return live_stack


@pytest.mark.live
@pytest.mark.process
def test_an_8mb_flood_finishes_and_keeps_its_head_and_tail(stack: LiveStack, tmp_path: Path) -> None:
    run, exit_after = _finish_flood(stack, tmp_path, 80_000, 100, 60)
    assert exit_after < 5, f"the exit arrived {exit_after:.1f} s after the job ended"
    chunks = _assert_kept_with_a_note(stack, run, 80_000, 100)
    print(f"8 MB flood: exit seen {exit_after:.2f} s after the job ended; {len(chunks)} chunks kept")

    # What an agent before the cap left in its spool: a 6.5 MB batch (split now, and stored), and
    # a batch the server refuses for good (dropped with a log line; not tried again).
    [(attempt_id,)] = stack.query("SELECT id FROM runs_attempt WHERE run_id=?", (run,))
    spool = stack.workdir / "agent-node-a" / "spool"
    big = [{"rank": 0, "seq": 1_000_000 + i, "stream": "stdout", "text": f"{i:08d} " + "o" * 32758 + "\n"} for i in range(200)]
    bad = [{"rank": 0, "seq": 2_000_000, "stream": "bogus", "text": "refused\n"}]
    for n, chunks_ in ((1, big), (2, bad)):
        item = {"kind": "logs", "path": A + "logs/", "attempt_id": attempt_id,
                "body": {"attempt_id": attempt_id, "number": 1, "chunks": chunks_}}
        (spool / f".{n}.tmp").write_text(json.dumps(item))
        (spool / f".{n}.tmp").rename(spool / f"{time.time_ns():020d}-logs.json")
    stack.wait_for(lambda: not list(spool.glob("*.json")), 30, "the spool to empty")
    stored = stack.query("SELECT count(*) FROM runs_logchunk WHERE attempt_id=? AND seq >= 1000000", (attempt_id,))[0][0]
    assert stored == 200
    agent_log = stack.log("node-a")
    assert agent_log.count("server refused a logs batch, dropping it") == 1 and "chunks[0].stream" in agent_log

    # The node takes the next run.
    nxt = submit(stack, "python -c \"print('next')\"")
    assert wait_status(stack, nxt, {"succeeded", "failed"}, 60)["status"] == "succeeded"


@pytest.mark.live
@pytest.mark.process
def test_cancel_during_a_flood_and_the_node_takes_the_next_run(stack: LiveStack, tmp_path: Path) -> None:
    run = submit(stack, f"python {write(tmp_path / 'endless.py', ENDLESS)}", grace=2)
    wait_status(stack, run, {"running"}, 60)
    log_file = stack.wait_for(lambda: next((p for p in (stack.workdir / "agent-node-a" / "runs").glob(f"{run}/*/agent/rank0.stdout.log")
                                            if p.stat().st_size > 30_000_000), None), 60, "30 MB of output")
    started = time.monotonic()
    assert stack.manage("debug_run", "cancel", str(run)).stdout.strip() == "running"
    row = wait_status(stack, run, {"cancelled", "failed", "succeeded"}, 2 + 10)
    assert row["status"] == "cancelled", row
    print(f"cancel during a flood: cancelled {time.monotonic() - started:.2f} s after the request, "
          f"{log_file.stat().st_size / 1e6:.0f} MB written")
    alice = stack.token("alice")
    chunks = stack.wait_for(lambda: (c := _logs(stack, run, alice)) and any(x["stream"] == "agent" for x in c) and c, 20,
                            "the note of what was dropped")
    assert sum(len(c["text"]) for c in chunks) < 2_500_000
    nxt = submit(stack, "python -c \"print('next')\"")
    assert wait_status(stack, nxt, {"succeeded", "failed"}, 60)["status"] == "succeeded"


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.process
def test_a_200mb_flood_finishes_and_keeps_its_head_and_tail(stack: LiveStack, tmp_path: Path) -> None:
    run, exit_after = _finish_flood(stack, tmp_path, 200_000, 1000, 120)
    assert exit_after < 10, f"the exit arrived {exit_after:.1f} s after the job ended"
    _assert_kept_with_a_note(stack, run, 200_000, 1000)
    print(f"200 MB flood: exit seen {exit_after:.2f} s after the job ended")
    nxt = submit(stack, "python -c \"print('next')\"")
    assert wait_status(stack, nxt, {"succeeded", "failed"}, 60)["status"] == "succeeded"


@pytest.mark.live
@pytest.mark.browser
def test_the_run_page_shows_a_note_that_arrives_while_it_is_open(live_stack: LiveStack, chromium: Any) -> None:
    from tests.tracking.test_browser import login, setup_live

    ids = setup_live(live_stack)
    context = chromium.new_context(viewport={"width": 1360, "height": 1000})
    try:
        page = context.new_page()
        login(page, live_stack.url)
        page.goto(f"{live_stack.url}/runs/{ids['run']}/")
        assert page.locator("#log-notes").is_hidden()
        note = "[trainyard: 6.0 MB of output dropped from rank 0 stdout (lines 10,486-70,000); the head and the tail are kept]\n"
        chunks = [{"rank": 0, "seq": 1, "stream": "stdout", "text": "the head\n"}, {"rank": 0, "seq": 2, "stream": "agent", "text": note},
                  {"rank": 0, "seq": 3, "stream": "stdout", "text": "the tail\n"}]
        body = json.dumps({"attempt_id": ids["attempt"], "number": 1, "chunks": chunks}).encode()
        req = urllib.request.Request(f"{live_stack.url}{A}logs/", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Node {ids['secret']}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read()) == {"accepted": 3}
        page.wait_for_function("() => document.getElementById('log-tail').textContent.includes('the tail')")
        assert page.locator("#log-notes").is_visible()
        assert page.locator("#log-notes").inner_text() == ("Attempt 1: 6.0 MB of output dropped from rank 0 stdout "
                                                           "(lines 10,486-70,000); the head and the tail are kept.")
        assert page.locator("#log-tail").inner_text().splitlines() == ["the head", note.strip(), "the tail"]
    finally:
        context.close()
