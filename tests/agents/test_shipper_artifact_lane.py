"""Artifacts go on a sender thread of their own: a large upload spooled before an attempt's exit
or progress does not hold them back. Checkpoints stay with the reports: a checkpoint's record and
upload still go before its attempt's exit (the server requeues on the exit; the next attempt
resumes from the latest stored checkpoint).

A real HTTP stub plays the server and the object store; a part PUT blocks on an Event until the
test lets it go. No timing assertions: only waits with generous timeouts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents import protocol
from agents.client import Client
from agents.shipper import Shipper, Spool, lane

A = protocol.API_PREFIX
WAIT_S = 60.0  # generous: the machine is shared and slow under load


class _Store(BaseHTTPRequestHandler):
    """The server's API and the object store in one. Part PUTs to /store/<name> wait for
    `release[name]` (when the test set one) and are recorded."""

    seen: list[str] = []
    bodies: dict[str, list[Any]] = {}
    release: dict[str, threading.Event] = {}
    put_started: dict[str, threading.Event] = {}
    changed = threading.Condition()

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("ETag", '"etag-1"')
        self.end_headers()
        self.wfile.write(raw)

    def _note(self, what: str, body: Any) -> None:
        with self.changed:
            self.seen.append(what)
            self.bodies.setdefault(what, []).append(body)
            self.changed.notify_all()

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        name = self.path.rsplit("/", 1)[-1]
        if name in self.put_started:
            self.put_started[name].set()
        if name in self.release:
            self.release[name].wait(WAIT_S)
        self._note(f"PUT {self.path}", data)
        self._answer(200, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        self._note(self.path, body)
        if self.path == A + "artifacts/":
            size = body["size"]
            self._answer(200, {"token": "tok-" + body["name"], "upload": {
                "upload_id": "up-a", "size": size, "parts": [{"number": 1, "url": "/store/" + body["name"], "offset": 0,
                                                              "size": size}]}})
        elif self.path == A + "checkpoints/":
            size = body["size"]
            self._answer(201, {"id": 1, "stored": False, "upload": {
                "upload_id": "up-c", "size": size, "parts": [{"number": 1, "url": "/store/" + body["file"], "offset": 0,
                                                              "size": size}]}})
        else:
            self._answer(200, {})


@pytest.fixture
def store() -> Iterator[tuple[str, type[_Store]]]:
    handler = type("Store", (_Store,), {"seen": [], "bodies": {}, "release": {}, "put_started": {},
                                        "changed": threading.Condition()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    for event in handler.release.values():
        event.set()  # never leave a request hanging
    server.shutdown()
    server.server_close()


def _until(handler: type[_Store], ok: Callable[[list[str]], bool]) -> bool:
    with handler.changed:
        return handler.changed.wait_for(lambda: ok(handler.seen), timeout=WAIT_S)


def _shipper(url: str, tmp_path: Path) -> tuple[Shipper, Spool]:
    spool = Spool(tmp_path / "spool", 1 << 20)
    client = Client(url, backoff_base=0.01, backoff_max=0.05)
    return Shipper(client, spool, interval=0.2, on_stale=lambda a, w: None, retry_for=5.0), spool


def _spool_artifact(spool: Spool, tmp_path: Path, name: str = "model.bin", data: bytes = b"m" * 4096) -> None:
    root = tmp_path / "run" / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)
    spool.put("artifact", {"path": A + "artifacts/", "attempt_id": 7, "root": str(root),
                           "body": {"attempt_id": 7, "number": 1, "name": name, "size": len(data), "sha256": "0" * 64}})


def _spool_progress_and_exit(spool: Spool) -> None:
    spool.put("progress", {"path": A + "progress/", "attempt_id": 7,
                           "body": {"attempt_id": 7, "number": 1, "lineage": [{"step": 1}]}})
    spool.put("event", {"path": A + "events/", "attempt_id": 7,
                        "body": {"attempt_id": 7, "number": 1, "node_rank": 0, "event": "exited", "exit_code": 0,
                                 "time": 0.0}})


def _wait_for(ok: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not ok() and time.monotonic() < deadline:
        time.sleep(0.05)
    return ok()


def _wait_empty(spool: Spool) -> bool:
    return _wait_for(lambda: not spool.items())


def test_artifacts_have_their_own_lanes_and_checkpoints_stay_with_the_reports(tmp_path: Path) -> None:
    def named(kind: str) -> Path:
        return tmp_path / f"00000000000000000001-{kind}.7.json"

    assert lane(named("artifact")) == ("artifacts", "7")
    assert lane(named("checkpoint")) == lane(named("event")) == lane(named("progress")) == ("reports", "7")
    assert lane(named("logs")) == ("logs", "7")


def test_a_blocked_artifact_upload_does_not_delay_the_exit_or_progress(store: tuple[str, type[_Store]],
                                                                        tmp_path: Path) -> None:
    url, handler = store
    handler.release["model.bin"] = release = threading.Event()
    handler.put_started["model.bin"] = started = threading.Event()
    shipper, spool = _shipper(url, tmp_path)
    _spool_artifact(spool, tmp_path)
    _spool_progress_and_exit(spool)  # spooled after the artifact
    shipper.start()
    try:
        assert started.wait(WAIT_S), "the artifact's part PUT began"
        assert _until(handler, lambda seen: A + "events/" in seen), "the exit went while the artifact's PUT was blocked"
        assert A + "progress/" in handler.seen
        assert not release.is_set() and "PUT /store/model.bin" not in handler.seen
        assert A + "artifacts/complete/" not in handler.seen
        assert _wait_for(lambda: [lane(p) for p in spool.items()] == [("artifacts", "7")]), "only the artifact is left"
        assert not release.is_set() and "PUT /store/model.bin" not in handler.seen, "its PUT still blocked"
        release.set()
        assert _until(handler, lambda seen: A + "artifacts/complete/" in seen), "the artifact completed once let go"
        assert _wait_empty(spool)
    finally:
        release.set()
        shipper.close(flush_timeout=0)
    assert handler.bodies[A + "artifacts/complete/"] == [{"attempt_id": 7, "number": 1, "token": "tok-model.bin",
                                                          "parts": [{"number": 1, "etag": '"etag-1"'}]}]
    assert handler.bodies["PUT /store/model.bin"] == [b"m" * 4096]
    assert handler.seen.count(A + "events/") == 1 and handler.seen.count(A + "artifacts/") == 1


def test_a_checkpoint_is_recorded_and_uploaded_before_its_attempts_exit(store: tuple[str, type[_Store]],
                                                                        tmp_path: Path) -> None:
    """Even while an artifact upload is blocked, and while the checkpoint's own PUT is slow."""
    url, handler = store
    handler.release["model.bin"] = artifact_release = threading.Event()
    handler.put_started["model.bin"] = artifact_started = threading.Event()
    handler.release["step-10.pt"] = ckpt_release = threading.Event()
    handler.put_started["step-10.pt"] = ckpt_started = threading.Event()
    ckpt_dir = tmp_path / "checkpoints"
    ckpt_dir.mkdir()
    (ckpt_dir / "step-10.pt").write_bytes(b"w" * 2048)
    shipper, spool = _shipper(url, tmp_path)
    _spool_artifact(spool, tmp_path)
    spool.put("checkpoint", {"path": A + "checkpoints/", "attempt_id": 7, "file": str(ckpt_dir / "step-10.pt"),
                             "body": {"attempt_id": 7, "number": 1, "step": 10, "file": "step-10.pt", "size": 2048,
                                      "sha256": "0" * 64, "metrics": {}}})
    _spool_progress_and_exit(spool)
    shipper.start()
    try:
        assert artifact_started.wait(WAIT_S) and ckpt_started.wait(WAIT_S), "both uploads began"
        assert A + "events/" not in handler.seen, "the exit waits for the checkpoint's upload"
        ckpt_release.set()
        assert _until(handler, lambda seen: A + "events/" in seen), "the exit went once the checkpoint was stored"
        assert "PUT /store/model.bin" not in handler.seen, "with the artifact's upload still blocked"
        artifact_release.set()
        assert _wait_empty(spool)
    finally:
        ckpt_release.set()
        artifact_release.set()
        shipper.close(flush_timeout=0)
    reports = [s for s in handler.seen if "model.bin" not in s and "artifacts/" not in s]
    assert reports == [A + "checkpoints/", "PUT /store/step-10.pt", A + "checkpoints/1/complete/", A + "progress/",
                       A + "events/"]
    assert handler.bodies[A + "checkpoints/1/complete/"] == [{"upload_id": "up-c", "parts": [{"number": 1,
                                                                                               "etag": '"etag-1"'}]}]


def test_artifacts_left_in_the_spool_are_sent_after_a_restart(store: tuple[str, type[_Store]], tmp_path: Path) -> None:
    url, handler = store
    spool = Spool(tmp_path / "spool", 1 << 20)
    _spool_artifact(spool, tmp_path)
    _spool_progress_and_exit(spool)
    restarted, spool = _shipper(url, tmp_path)  # a new Spool over the same directory, as after a restart
    assert len(spool.items()) == 3
    restarted.start()
    try:
        assert _wait_empty(spool)
    finally:
        restarted.close(flush_timeout=0)
    assert A + "artifacts/complete/" in handler.seen and A + "events/" in handler.seen


def test_close_flushes_both_senders(store: tuple[str, type[_Store]], tmp_path: Path) -> None:
    url, handler = store
    shipper, spool = _shipper(url, tmp_path)
    shipper.start()
    try:
        _spool_artifact(spool, tmp_path)
        _spool_progress_and_exit(spool)
    finally:
        shipper.close(flush_timeout=WAIT_S)
    assert spool.items() == []
    assert A + "artifacts/complete/" in handler.seen and A + "events/" in handler.seen
    assert all(not t.is_alive() for t in shipper.threads)
