"""Ships what jobs write (metrics, events, checkpoint records and files, logs) and what the agent
measures (energy) and decides (attempt events) to the server, through a bounded disk spool.

Tailers read new complete lines from each attempt's files, turn them into spool items (one JSON
file each, fsync'd) and only then advance their durable offsets, so a crash replays at worst a
batch the server already has (replays are idempotent server-side). Logs are capped per rank and
stream (agents.logcap). One sender thread posts items oldest first in two lanes per attempt,
logs and the rest, so that a log upload that fails cannot hold back an exit; a second one uploads
artifacts (lanes of their own), so that a large upload does not delay reports or logs at all.
Checkpoints stay with the reports: their record and upload go before the attempt's exit. When the
server is unreachable the senders back off and keep their items, so jobs keep running. An item
that keeps failing while the server answers others is dropped after MAX_STRIKES. Past
`spool_max_bytes` the oldest metric batches are dropped, and counted.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import protocol
from agents.client import ApiError, Client, Unreachable
from agents.logcap import LogCap, LogLimits
from agents.redact import Redactor

log = logging.getLogger("agents.shipper")
P = protocol.API_PREFIX
# A log batch is kept to half the server's limit: room for a proxy's or a setting's lower one.
LOG_BATCH_BYTES = protocol.MAX_BODY_BYTES // 2
# Text per log chunk, in bytes: decoded and escaped, it stays under the server's per-chunk limit.
LOG_CHUNK_BYTES = protocol.MAX_LOG_CHUNK_BYTES // 2
# Failures of one item while the server answered others, before the item is dropped.
MAX_STRIKES = 5
STRIKE_BACKOFF_S = 2.0  # doubled with each strike, at most a minute
# The server answered something this recently (the heartbeat does every few seconds): it is there.
ANSWERED_RECENTLY_S = 15.0


def _atomic_write(path: Path, text: str, *, fsync: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def _any_kind(kind: str) -> bool:
    return True


def _artifact_kind(kind: str) -> bool:
    return kind == "artifact"  # the artifacts lanes (lane())


def _other_kind(kind: str) -> bool:
    return kind != "artifact"


class Spool:
    """An ordered on-disk queue of requests to make."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.wake = threading.Event()
        # One per sender thread (waker()), with the kinds it sends: put() wakes only those that
        # send its kind, so a log flood does not make the artifacts sender rescan the spool.
        self.wakes: list[tuple[Callable[[str], bool], threading.Event]] = [(_any_kind, self.wake)]
        self.dropped_points = 0
        names = sorted(p.name for p in self.dir.glob("*.json"))
        self.counter = max([time.time_ns()] + [int(n.split("-", 1)[0]) for n in names if n.split("-", 1)[0].isdigit()])
        self.bytes = sum(p.stat().st_size for p in self.dir.glob("*.json"))

    def put(self, kind: str, item: dict[str, Any]) -> None:
        text = json.dumps({"kind": kind, **item}, separators=(",", ":"), allow_nan=False)
        with self.lock:
            self.counter += 1
            path = self.dir / f"{self.counter:020d}-{kind}.{int(item.get('attempt_id', 0))}.json"
            _atomic_write(path, text)
            self.bytes += len(text)
            if self.bytes > self.max_bytes:
                self._shed()
        self.notify(kind)

    def waker(self, sends: Callable[[str], bool] = _any_kind) -> threading.Event:
        """An event of the caller's own that put() sets for the kinds it `sends`: each sender waits
        on and clears its own."""
        event = threading.Event()
        with self.lock:
            self.wakes.append((sends, event))
        return event

    def notify(self, kind: str | None = None) -> None:
        """Wake the senders of `kind` (None: all of them)."""
        for sends, event in list(self.wakes):
            if kind is None or sends(kind):
                event.set()

    def _shed(self) -> None:
        for path in sorted(self.dir.glob("*-metrics.*json")):
            if self.bytes <= self.max_bytes:
                return
            try:
                item = json.loads(path.read_text())
                size = path.stat().st_size
                path.unlink()
            except (OSError, ValueError):
                continue
            self.bytes -= size
            self.dropped_points += len(item.get("body", {}).get("points", []))
            log.warning("spool over %d bytes: dropped the oldest metric batch; %d points dropped so far",
                        self.max_bytes, self.dropped_points)

    def items(self) -> list[Path]:
        return sorted(self.dir.glob("*.json"))

    def rewrite(self, path: Path, item: dict[str, Any]) -> None:
        """Keep what the sender learned about an item (its strikes) across restarts."""
        text = json.dumps(item, separators=(",", ":"), allow_nan=False)
        with self.lock:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return  # shed or sent meanwhile
            _atomic_write(path, text)
            self.bytes += len(text) - size

    def remove(self, path: Path) -> None:
        with self.lock:
            try:
                size = path.stat().st_size
                path.unlink()
                self.bytes -= size
            except FileNotFoundError:
                return


def lane(path: Path) -> tuple[str, str]:
    """Items in one lane go in order; lanes do not wait for each other. Names are
    <counter>-<kind>.<attempt>.json (<counter>-<kind>.json before lanes)."""
    kind, _, attempt = path.name.removesuffix(".json").partition("-")[2].partition(".")
    # Artifacts have their own lanes, sent by a thread of their own (Shipper.start): a large upload
    # must not hold back an exit report, progress or logs. Checkpoints stay in "reports": a
    # checkpoint's record and upload go before its attempt's exit (the next attempt resumes from it).
    return ("logs" if kind == "logs" else "artifacts" if kind == "artifact" else "reports", attempt)


@dataclass
class Tail:
    """Offsets and counters of one attempt's files, kept in <attempt>/agent/ship-state.json."""

    attempt_id: int
    number: int
    rank: int
    run_dir: Path
    checkpoint_dir: Path
    log_dir: Path
    state_path: Path
    offsets: dict[str, int] = field(default_factory=dict)
    log_seq: int = 0
    last_step: int | None = None
    total_steps: int | None = None
    progress_sent: tuple[int | None, int | None] = (None, None)
    progress_at: float = 0.0
    # Redacts the run's secret values from what the job wrote to its own files (lineage).
    redactor: Redactor = field(default_factory=lambda: Redactor({}))
    # The global ranks of this node's processes: each writes rank<R>.<stream>.log (agents.launch).
    ranks: list[int] = field(default_factory=list)
    # Per "rank<R>.<stream>": how much of that log is shipped, skipped or still undecided.
    logs: dict[str, LogCap] = field(default_factory=dict)

    def save(self) -> None:
        _atomic_write(self.state_path, json.dumps({"offsets": self.offsets, "log_seq": self.log_seq, "last_step": self.last_step,
                                                   "total_steps": self.total_steps, "progress_sent": list(self.progress_sent),
                                                   "logs": {k: cap.to_json() for k, cap in self.logs.items()}}))

    def load(self) -> None:
        if self.state_path.exists():
            data = json.loads(self.state_path.read_text())
            self.offsets, self.log_seq = data["offsets"], data["log_seq"]
            self.last_step, self.total_steps = data.get("last_step"), data.get("total_steps")
            self.progress_sent = tuple(data.get("progress_sent") or (None, None))
            self.logs = {k: LogCap.from_json(v) for k, v in (data.get("logs") or {}).items()}
            for key, offset in self.offsets.items():
                if key.startswith("rank") and key not in self.logs:  # state written before logs were capped
                    self.logs[key] = LogCap(offset=offset, shipped=offset)

    def log_cap(self, key: str) -> LogCap:
        return self.logs.setdefault(key, LogCap())


def _error_code(err: ApiError) -> str:
    error = err.body.get("error") if isinstance(err.body, dict) else None
    return str(error.get("code", "")) if isinstance(error, dict) else ""


def _utf8_pieces(data: bytes, size: int) -> list[str]:
    """data as text in pieces of at most `size` bytes, cut between characters where it can be."""
    out = []
    i = 0
    while i < len(data):
        j = min(len(data), i + size)
        k = j
        while j < len(data) and k > max(i, j - 3) and data[k] & 0xC0 == 0x80:  # a UTF-8 continuation byte
            k -= 1
        if j < len(data) and k > i and data[k] & 0xC0 != 0x80:
            j = k
        out.append(data[i:j].decode("utf-8", errors="replace"))
        i = j
    return out


def log_batches(attempt_id: int, number: int, chunks: list[protocol.LogChunkMsg]) -> list[protocol.LogBatch]:
    """Chunks in bodies of at most LOG_BATCH_BYTES and MAX_LOG_CHUNKS chunks each."""
    envelope = len(json.dumps({"attempt_id": attempt_id, "number": number, "chunks": []}, separators=(",", ":")))
    batches: list[protocol.LogBatch] = []
    current: list[protocol.LogChunkMsg] = []
    size = envelope
    for chunk in chunks:
        n = len(json.dumps(chunk, separators=(",", ":"))) + 1
        if current and (size + n > LOG_BATCH_BYTES or len(current) >= protocol.MAX_LOG_CHUNKS):
            batches.append({"attempt_id": attempt_id, "number": number, "chunks": current})
            current, size = [], envelope
        current.append(chunk)
        size += n
    if current:
        batches.append({"attempt_id": attempt_id, "number": number, "chunks": current})
    return batches


def _open_job_file(path: Path) -> Any:
    """A file the job names, opened for the agent (root) without following a link the job may
    have put there (a checkpoint 'file' pointing at the node credential would upload it)."""
    return _regular_file(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), path.name)


def _regular_file(fd: int, name: str) -> Any:
    """The open descriptor as a binary file if it is a regular file (not a FIFO or device that
    would block or never end); closed and refused otherwise."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{name} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_job_file_in(root: Path, name: str) -> Any:
    """The job's file `name` (a relative path) under `root`, every folder on the way opened
    without following links: a job cannot point the agent (root) at a file outside its folder."""
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") for part in parts):
        raise OSError(f"{name!r} is not a relative path inside the run")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    return _regular_file(file_fd, name)


def _read_new(path: Path, offset: int, *, final: bool, limit: int = 8 << 20) -> tuple[bytes, int]:
    """New complete lines from offset (a trailing fragment waits, unless the writer has exited)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(limit)
    except FileNotFoundError:
        return b"", offset
    if not final or len(data) == limit:
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) >= protocol.MAX_LOG_CHUNK_BYTES:
            cut = protocol.MAX_LOG_CHUNK_BYTES  # one endless line: ship it in pieces
        data = data[:cut]
    return data, offset + len(data)


class Shipper:
    def __init__(self, client: Client, spool: Spool, *, interval: float, on_stale: Callable[[int, str], None],
                 log_limits: LogLimits | None = None, retry_for: float = 10.0) -> None:
        self.client = client
        self.retry_for = retry_for  # how long one try of an item retries before it counts as failed
        self.log_limits = log_limits or LogLimits()
        # Spool item name -> the monotonic time it may be tried again (it holds up its lane till then);
        # each sender thread has its own: `held` for reports and logs, `artifacts_held` for artifacts.
        self.held: dict[str, float] = {}
        self.artifacts_held: dict[str, float] = {}
        self.spool = spool
        self.interval = interval
        self.on_stale = on_stale
        self.tails: dict[int, Tail] = {}
        self.lock = threading.RLock()
        self.stale: set[int] = set()
        self.stale_lock = threading.Lock()  # both senders may find an attempt stale
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    # --- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        senders = [("shipper-send", False, self.held), ("shipper-artifacts", True, self.artifacts_held)]
        threads = [threading.Thread(target=self._tail_loop, name="shipper-tail", daemon=True)] + [
            threading.Thread(target=self._send_loop, args=(artifacts, held, self.spool.waker(_artifact_kind if artifacts else _other_kind)),
                             name=name, daemon=True)
            for name, artifacts, held in senders]
        for t in threads:
            t.start()
            self.threads.append(t)

    def close(self, flush_timeout: float) -> None:
        """Tail once more, give the senders up to flush_timeout to empty the spool, then stop."""
        with self.lock:
            for tail in list(self.tails.values()):
                self._tail(tail, final=False)
        deadline = time.monotonic() + flush_timeout
        while self.spool.items() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = len(self.spool.items())
        if left:
            log.warning("stopping with %d items still in the spool %s; they are sent on the next start", left, self.spool.dir)
        self.stop.set()
        self.spool.notify()
        for t in self.threads:
            t.join(5)

    # --- attempts ---------------------------------------------------------------------
    def add(self, tail: Tail) -> None:
        tail.load()
        with self.lock:
            self.tails[tail.attempt_id] = tail

    def finish(self, attempt_id: int) -> None:
        """The job exited: ship everything it wrote, including a last line without newline."""
        with self.lock:
            tail = self.tails.pop(attempt_id, None)
            if tail is not None:
                self._tail(tail, final=True)

    def event(self, body: protocol.AttemptEvent) -> None:
        self.spool.put("event", {"path": P + "events/", "attempt_id": body["attempt_id"], "body": body})

    def rendezvous(self, body: protocol.RendezvousReport) -> None:
        self.spool.put("rendezvous", {"path": P + "rendezvous/", "attempt_id": body["attempt_id"], "body": body})

    def energy(self, body: protocol.EnergyBatch) -> None:
        self.spool.put("energy", {"path": P + "energy/", "attempt_id": body["attempt_id"], "body": body})

    def lineage(self, body: protocol.LineageReport) -> None:
        self.spool.put("lineage", {"path": P + "lineage/", "attempt_id": body["attempt_id"], "body": body})

    # --- tailing ----------------------------------------------------------------------
    def _tail_loop(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                for tail in list(self.tails.values()):
                    try:
                        self._tail(tail, final=False)
                    except (OSError, ValueError) as err:
                        log.error("tailing attempt %d failed: %s", tail.attempt_id, err)

    def _tail(self, tail: Tail, *, final: bool) -> None:
        if tail.attempt_id in self.stale:
            return
        # Jobs log a step, then checkpoint it. Reading the checkpoint records first and the metrics
        # second, but spooling the metrics first, means a checkpoint never reaches the server ahead
        # of a step it covers: a resume from it can then never leave a hole in the series.
        # Checkpoint records go before events: a checkpoint_deleted event must not overtake them.
        checkpoints = self._lines(tail, "checkpoints", tail.checkpoint_dir / "checkpoints.jsonl", final)
        changed = self._tail_metrics(tail, final)
        changed |= self._put_checkpoints(tail, checkpoints)
        changed |= self._tail_events(tail, final)
        changed |= self._tail_artifacts(tail, final)
        for rank in tail.ranks or [tail.rank]:
            for stream in ("stdout", "stderr"):
                changed |= self._tail_log(tail, rank, stream, final)
        progress = (tail.total_steps, tail.last_step)
        if progress != tuple(tail.progress_sent) and (final or time.monotonic() - tail.progress_at >= 2.0):
            body: protocol.ProgressReport = {"attempt_id": tail.attempt_id, "number": tail.number,
                                             "total_steps": tail.total_steps, "steps_done": tail.last_step}
            self.spool.put("progress", {"path": P + "progress/", "attempt_id": tail.attempt_id, "body": body})
            tail.progress_sent, tail.progress_at, changed = progress, time.monotonic(), True
        if changed:
            tail.save()

    def _lines(self, tail: Tail, key: str, path: Path, final: bool) -> list[dict[str, Any]]:
        data, new = _read_new(path, tail.offsets.get(key, 0), final=final)
        if not data:
            return []
        tail.offsets[key] = new
        out = []
        for raw in data.splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                log.warning("attempt %d: skipping a malformed line in %s", tail.attempt_id, path.name)
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def _tail_metrics(self, tail: Tail, final: bool) -> bool:
        lines = self._lines(tail, "metrics", tail.run_dir / "metrics.jsonl", final)
        if not lines:
            return False
        points: list[list[Any]] = []
        for line in lines:
            step, when, metrics = line.get("step"), line.get("time", time.time()), line.get("metrics")
            if not isinstance(step, int) or not isinstance(metrics, dict):
                continue
            tail.last_step = step if tail.last_step is None else max(tail.last_step, step)
            points.extend([key, step, value, when] for key, value in metrics.items())
        for i in range(0, len(points), protocol.MAX_METRIC_POINTS):
            body: protocol.MetricBatch = {"attempt_id": tail.attempt_id, "attempt": tail.number,
                                          "points": points[i:i + protocol.MAX_METRIC_POINTS]}
            self.spool.put("metrics", {"path": P + "metrics/", "attempt_id": tail.attempt_id, "body": body})
        return True

    def _tail_events(self, tail: Tail, final: bool) -> bool:
        lines = self._lines(tail, "events", tail.run_dir / "events.jsonl", final)
        lineage: dict[str, Any] = {}
        for line in lines:
            if line.get("type") == "progress" and isinstance(line.get("total_steps"), int):
                tail.total_steps = line["total_steps"]
            elif line.get("type") == "lineage" and isinstance(line.get("data"), dict):
                lineage.update(line["data"])
            elif line.get("type") == "checkpoint_deleted" and isinstance(line.get("step"), int) and isinstance(line.get("file"), str):
                gone: protocol.CheckpointDeleted = {"attempt_id": tail.attempt_id, "number": tail.number, "step": line["step"],
                                                    "file": line["file"]}
                self.spool.put("checkpoint_deleted", {"path": P + "checkpoints/deleted/", "attempt_id": tail.attempt_id,
                                                      "body": gone})
        if lineage:
            lineage = tail.redactor.redact_json(lineage)
            body: protocol.ProgressReport = {"attempt_id": tail.attempt_id, "number": tail.number, "lineage": lineage}
            self.spool.put("progress", {"path": P + "progress/", "attempt_id": tail.attempt_id, "body": body})
        return bool(lines)

    def _put_checkpoints(self, tail: Tail, lines: list[dict[str, Any]]) -> bool:
        for rec in lines:
            body: protocol.CheckpointReport = {"attempt_id": tail.attempt_id, "number": tail.number, "step": rec.get("step", 0),
                                               "file": rec.get("file", ""), "size": rec.get("size", 0),
                                               "sha256": rec.get("sha256", ""), "metrics": rec.get("metrics") or {}}
            self.spool.put("checkpoint", {"path": P + "checkpoints/", "attempt_id": tail.attempt_id, "body": body,
                                          "file": str(tail.checkpoint_dir / str(rec.get("file", "")))})
        return bool(lines)

    def _tail_artifacts(self, tail: Tail, final: bool) -> bool:
        lines = self._lines(tail, "artifacts", tail.run_dir / "artifacts.jsonl", final)
        for rec in lines:
            name, size, sha256 = rec.get("name"), rec.get("size"), rec.get("sha256")
            if not isinstance(name, str) or not isinstance(size, int) or not isinstance(sha256, str):
                log.warning("attempt %d: skipping a malformed artifact record", tail.attempt_id)
                continue
            body: protocol.ArtifactReport = {"attempt_id": tail.attempt_id, "number": tail.number, "name": name, "size": size,
                                             "sha256": sha256}
            self.spool.put("artifact", {"path": P + "artifacts/", "attempt_id": tail.attempt_id, "body": body,
                                        "root": str(tail.run_dir / "artifacts")})
        return bool(lines)

    def _tail_log(self, tail: Tail, rank: int, stream: str, final: bool) -> bool:
        key = f"rank{rank}.{stream}"
        cap = tail.log_cap(key)
        pieces = cap.take(tail.log_dir / f"{key}.log", final=final, now=time.time(), limits=self.log_limits,
                          label=f"rank {rank} {stream}")
        if not pieces:
            return False
        chunks: list[protocol.LogChunkMsg] = []
        for content in pieces:
            if isinstance(content, str):
                tail.log_seq += 1
                chunks.append({"rank": rank, "seq": tail.log_seq, "stream": "agent", "text": content})
                log.warning("attempt %d: %s", tail.attempt_id, content.strip())
                continue
            for text in _utf8_pieces(content, LOG_CHUNK_BYTES):
                tail.log_seq += 1
                chunks.append({"rank": rank, "seq": tail.log_seq, "stream": stream, "text": text})
        for body in log_batches(tail.attempt_id, tail.number, chunks):
            self.spool.put("logs", {"path": P + "logs/", "attempt_id": tail.attempt_id, "body": body})
        return True

    # --- sending ----------------------------------------------------------------------
    def _items(self, artifacts: bool) -> list[Path]:
        """The spool's items one sender sends: the artifacts, or all the rest."""
        return [p for p in self.spool.items() if (lane(p)[0] == "artifacts") == artifacts]

    def _send_loop(self, artifacts: bool = False, held: dict[str, float] | None = None,
                   wake: threading.Event | None = None) -> None:
        held = self.held if held is None else held
        wake = self.spool.wake if wake is None else wake
        while not self.stop.is_set():
            items = self._items(artifacts)
            if not items:
                wake.wait(1.0)
                wake.clear()
                continue
            if not self._send_round(items, held):
                self.stop.wait(1.0)  # the server is away: back off, keep everything
            else:
                lanes = self._held_lanes(held)
                if lanes and all(lane(p) in lanes for p in self._items(artifacts)):
                    # Only held items are left: wait for the first one's time, or for news.
                    wake.wait(min(1.0, min(held.values()) - time.monotonic()))
                    wake.clear()

    def _held_lanes(self, held: dict[str, float]) -> set[tuple[str, str]]:
        now = time.monotonic()
        for name in [name for name, until in held.items() if until <= now]:
            del held[name]
        return {lane(self.spool.dir / name) for name in held}

    def _send_round(self, items: list[Path], held: dict[str, float] | None = None) -> bool:
        """Try each lane's items in order; False when the server did not answer at all. `held` is
        the sending thread's own (self.held unless given)."""
        held = self.held if held is None else held
        blocked = self._held_lanes(held)
        failed: list[tuple[Path, dict[str, Any], Unreachable, float]] = []
        for path in items:
            if self.stop.is_set():
                return True
            if lane(path) in blocked:
                continue
            try:
                item = json.loads(path.read_text())
            except FileNotFoundError:
                continue  # shed meanwhile
            except ValueError:
                log.error("dropping unreadable spool item %s", path.name)
                self.spool.remove(path)
                continue
            started = time.monotonic()
            try:
                # Once something failed, a short try: it is a probe of whether the server is there.
                self._send(item, retry_for=min(2.0, self.retry_for) if item.get("strikes") or failed else self.retry_for)
            except Unreachable as err:
                blocked.add(lane(path))
                failed.append((path, item, err, started))
                if len(failed) > 1 and not self._answered_since(failed[0][3]):
                    break  # two lanes failed and nothing answered: the server is away
                continue
            held.pop(path.name, None)
            self.spool.remove(path)
        if failed and not self._answered_since(failed[0][3]):
            log.warning("server unreachable, keeping %d spooled items: %s", len(items), failed[0][2])
            return False
        for path, item, problem, started in failed:
            if self._answered_since(started):
                self._strike(path, item, problem, held)
        return True

    def _answered_since(self, started: float) -> bool:
        """Whether the server answered anything while an item was being tried, or shortly before."""
        return self.client.answered_at > started - ANSWERED_RECENTLY_S

    def _strike(self, path: Path, item: dict[str, Any], err: Unreachable, held: dict[str, float]) -> None:
        """The server answers others but not this item (a 5xx of its own, a connection it breaks):
        retried with backoff, without holding up the other lane, and dropped after MAX_STRIKES,
        also across restarts."""
        item["strikes"] = strikes = int(item.get("strikes", 0)) + 1
        if strikes >= MAX_STRIKES:
            log.error("dropping a %s report for attempt %s: it failed %d times while the server answered others: %s",
                      item.get("kind"), item.get("attempt_id"), strikes, err)
            held.pop(path.name, None)
            self.spool.remove(path)
            return
        delay = min(60.0, STRIKE_BACKOFF_S * 2 ** (strikes - 1))
        log.warning("a %s report for attempt %s failed while the server answers others (%d of %d); trying it again in %.0f s: %s",
                    item.get("kind"), item.get("attempt_id"), strikes, MAX_STRIKES, delay, err)
        self.spool.rewrite(path, item)
        held[path.name] = time.monotonic() + delay

    def _send(self, item: dict[str, Any], *, retry_for: float = 10.0) -> None:
        attempt_id = int(item.get("attempt_id", 0))
        if attempt_id in self.stale:
            return
        try:
            if item["kind"] == "logs":
                # Batches spooled before they were kept under the limit go in parts.
                for body in log_batches(item["body"]["attempt_id"], item["body"]["number"], item["body"]["chunks"]):
                    self._post_logs(body, retry_for=retry_for)
                return
            if item["kind"] == "artifact":
                self._ship_artifact(item, retry_for=retry_for)
                return
            resp = self.client.request("POST", item["path"], item["body"], retry_for=retry_for)
            if item["kind"] == "checkpoint" and isinstance(resp, dict) and not resp.get("stored"):
                self._upload(int(resp["id"]), Path(item["file"]), resp.get("upload"))
        except ApiError as err:
            if err.status == 409 and _error_code(err) == "lineage_immutable":
                # Another record for this attempt and rank is already stored: lineage is written once.
                log.error("attempt %d: the server keeps the lineage it has: %s", attempt_id, err)
            elif err.status == 409:
                with self.stale_lock:
                    news = attempt_id not in self.stale
                    self.stale.add(attempt_id)
                if news:  # once, though both senders may find out
                    log.warning("attempt %d is stale or finished (%s); dropping its reports and killing it", attempt_id, err)
                    self.on_stale(attempt_id, str(err))
            else:
                log.error("server refused a %s batch, dropping it: %s", item["kind"], err)

    def _post_logs(self, body: protocol.LogBatch, *, retry_for: float) -> None:
        """A batch the server finds too large goes again in halves (its limit may be lower than
        the protocol's); a single chunk it refuses is dropped like any refused batch."""
        try:
            self.client.request("POST", P + "logs/", body, retry_for=retry_for)
        except ApiError as err:
            if not (err.status == 413 or err.code == "too_large") or len(body["chunks"]) < 2:
                raise
            half = len(body["chunks"]) // 2
            log.warning("server refused a log batch as too large (%s); sending it in halves", err)
            for chunks in (body["chunks"][:half], body["chunks"][half:]):
                self._post_logs({"attempt_id": body["attempt_id"], "number": body["number"], "chunks": chunks}, retry_for=retry_for)

    def _ship_artifact(self, item: dict[str, Any], *, retry_for: float) -> None:
        """Ask for a plan, put the file's bytes by it, confirm: the server reads them back."""
        report: protocol.ArtifactReport = item["body"]
        try:
            fh = _open_job_file_in(Path(item["root"]), report["name"])
        except FileNotFoundError:
            log.info("artifact %s of attempt %d is gone; not uploaded", report["name"], report["attempt_id"])
            return
        except OSError as err:
            log.error("artifact %s of attempt %d is not a plain file of the job's (%s); not uploaded", report["name"],
                      report["attempt_id"], err)
            return
        with fh:
            if os.fstat(fh.fileno()).st_size != report["size"]:
                log.info("artifact %s was replaced since it was recorded; its later record ships it", report["name"])
                return
            plan: protocol.ArtifactPlan = self.client.request("POST", P + "artifacts/", report, retry_for=retry_for)
            done: list[protocol.CompletedPart] = [
                {"number": part["number"], "etag": self.client.put_part(part["url"], fh, part["offset"], part["size"])}
                for part in plan["upload"]["parts"]]
        body: protocol.ArtifactComplete = {"attempt_id": report["attempt_id"], "number": report["number"],
                                           "token": plan["token"], "parts": done}
        self.client.request("POST", P + "artifacts/complete/", body, retry_for=30.0, timeout=600)

    def _upload(self, checkpoint_id: int, path: Path, plan: protocol.UploadPlan | None) -> None:
        """Put the file in the object store by the plan's presigned URLs (parts for a large one),
        then ask the server to check it; a server without plans (protocol < 5) takes the bytes itself."""
        try:
            fh = _open_job_file(path)
        except FileNotFoundError:
            # Routine with keep-last-K and frequent checkpoints (one line per checkpoint at info).
            log.debug("checkpoint file %s is gone (keep-last-K); not uploaded", path.name)
            return
        except OSError as err:
            log.error("checkpoint file %s is not a plain file of the job's (%s); not uploaded", path, err)
            return
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if plan is None:
                self.client.request("PUT", f"{P}checkpoints/{checkpoint_id}/file/", data=fh, retry_for=30.0, timeout=300,
                                    headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
                return
            done: list[protocol.CompletedPart] = [
                {"number": part["number"], "etag": self.client.put_part(part["url"], fh, part["offset"], part["size"])}
                for part in plan["parts"]]
        body: protocol.CheckpointComplete = {"upload_id": plan["upload_id"], "parts": done}
        # The server reads the object back to check it: allow for a large file.
        self.client.request("POST", f"{P}checkpoints/{checkpoint_id}/complete/", body, retry_for=30.0, timeout=600)
