"""The in-job SDK: what a training process uses to talk to Trainyard.

Standard library only. The job never speaks to the server; it writes files into directories
the node agent gave it, and the agent ships them. This docstring is the protocol: the agent
(``agents/``) implements the other side exactly as written here.

Environment (set by the agent for every job process)
----------------------------------------------------
``TRAINYARD_RUN_ID``                    the run's id (a string; the SDK never parses it).
``TRAINYARD_ATTEMPT``                   the attempt number, an int (1 for the first).
``TRAINYARD_RUN_DIR``                   per attempt, private to the attempt. Its presence is what
                                        "inside the portal" means.
``TRAINYARD_CHECKPOINT_DIR``            per run, shared by every attempt of the run on that node.
``TRAINYARD_PARAMS``                    JSON object: the run's validated parameters.
``TRAINYARD_CHECKPOINT_EVERY_STEPS``    int, 0 = off.
``TRAINYARD_CHECKPOINT_EVERY_SECONDS``  int, 0 = off.
``TRAINYARD_CHECKPOINT_KEEP``           int, keep the last K checkpoints; 0 or unset = keep all.
``TRAINYARD_INIT_CHECKPOINT``           optional: path of a checkpoint file of ANOTHER run to
                                        start from (fine-tune, evaluate).
``MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK CUDA_VISIBLE_DEVICES``  torch.distributed's.

Every variable is read on its own, so a developer may set a few of them by hand (for example
``TRAINYARD_PARAMS`` and ``TRAINYARD_CHECKPOINT_DIR`` to try resume locally).

Outside the portal (no ``TRAINYARD_RUN_DIR``) the SDK is a sink to a fresh local folder
``./trainyard-local/<YYYYmmdd-HHMMSS-ffffff>/`` holding the same files, created on the first
write; checkpoints go to ``<that folder>/checkpoints/`` unless ``TRAINYARD_CHECKPOINT_DIR`` is
set. So a script runs unchanged on a laptop.

Files (written by RANK 0 only; on other ranks every write is a no-op)
---------------------------------------------------------------------
All ``*.jsonl`` files are UTF-8, one strict-JSON object per line, each line ending in ``\\n``.
A reader must treat a trailing fragment without ``\\n`` as not yet written (keep it, read again)
and must ignore keys and event types it does not know.

``$TRAINYARD_RUN_DIR/metrics.jsonl`` -- one line per ``log()`` call::

    {"step": 12, "time": 1718000000.123, "metrics": {"loss": 0.25, "lr": 0.001}}

``step`` is an int >= 0; ``time`` unix seconds (float); ``metrics`` maps a non-empty key (at most
200 characters) to a number: an int, or a float where non-finite values are the strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``. A step may appear again (a resumed attempt re-logging
it): the later line wins. Written through one line-buffered append handle, one ``write()`` per
line, no fsync, so lines reach the file at once and cost a few microseconds each.

``$TRAINYARD_RUN_DIR/events.jsonl`` -- one line per event::

    {"type": "progress", "total_steps": 300, "time": t}          # set_total_steps(300)
    {"type": "lineage", "data": {...}, "time": t}                 # record_lineage(**data)
    {"type": "checkpoint_deleted", "file": "ckpt-0000000100.pt", "step": 100, "time": t}

``lineage`` data is a JSON object (non-finite floats encoded as in metrics, paths as strings);
several lineage events merge, later keys winning. ``checkpoint_deleted`` tells the shipper that
keep-last-K removed a file recorded earlier.

``$TRAINYARD_CHECKPOINT_DIR/ckpt-{step:010d}.pt`` -- checkpoint files, and
``$TRAINYARD_CHECKPOINT_DIR/checkpoints.jsonl`` -- one record per completed checkpoint::

    {"step": 100, "file": "ckpt-0000000100.pt", "size": 12345, "sha256": "<64 hex>",
     "metrics": {"loss": 0.1}, "time": t, "attempt": 1}

``file`` is relative to the checkpoint directory. A record is appended (and fsync'd) only after
the file is complete, fsync'd, atomically renamed into place and the directory fsync'd, so a
record always names a whole file. While being written a checkpoint is a temp file
``.ckpt-{step:010d}.a{attempt}.<random>.tmp`` in the same directory; shippers ignore dotfiles.
The same step may be recorded twice (a later attempt rewrote it): the later record describes
the file on disk. The newest record whose file exists and whose sha256 matches is the one to
resume from. After each checkpoint the SDK keeps the K most recently recorded files and
deletes older ones (never the one just written), plus any ``ckpt-*.pt`` no record names.

Signals
-------
On first use (any API call, or ``init()``) the SDK installs a SIGTERM handler that only sets the
flag ``should_stop()`` returns, then calls a previously installed Python-level handler if any;
it never chains to the default action, which would kill the process. The agent preempts a run
by sending SIGTERM: the job should checkpoint at its current step and exit 0. SIGINT is left
alone, so Ctrl-C behaves as usual outside the portal. The handler can be installed only from
the main thread; call ``trainyard.init()`` early if your first SDK call happens in another.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import datetime
import hashlib
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import IO, Any

from trainyard._encoding import as_step, decode_number, dumps, encode_json, encode_metrics, metrics_line

__all__ = [
    "Checkpoint",
    "attempt",
    "checkpoint",
    "checkpoint_dir",
    "checkpoint_due",
    "close",
    "in_portal",
    "init",
    "init_checkpoint",
    "latest_checkpoint",
    "local_rank",
    "log",
    "params",
    "rank",
    "record_lineage",
    "run_dir",
    "run_id",
    "set_total_steps",
    "should_stop",
    "world_size",
]

ENV_RUN_ID = "TRAINYARD_RUN_ID"
ENV_ATTEMPT = "TRAINYARD_ATTEMPT"
ENV_RUN_DIR = "TRAINYARD_RUN_DIR"
ENV_CHECKPOINT_DIR = "TRAINYARD_CHECKPOINT_DIR"
ENV_PARAMS = "TRAINYARD_PARAMS"
ENV_CHECKPOINT_EVERY_STEPS = "TRAINYARD_CHECKPOINT_EVERY_STEPS"
ENV_CHECKPOINT_EVERY_SECONDS = "TRAINYARD_CHECKPOINT_EVERY_SECONDS"
ENV_CHECKPOINT_KEEP = "TRAINYARD_CHECKPOINT_KEEP"
ENV_INIT_CHECKPOINT = "TRAINYARD_INIT_CHECKPOINT"

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
LOCAL_ROOT = "trainyard-local"

_CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")
_TEMP_NAME = re.compile(r"^\.ckpt-\d{10}\.a(\d+)\.[0-9a-f]+\.tmp$")
_HASH_CHUNK = 1 << 20

@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: its file exists and its sha256 matches its record."""

    path: str
    step: int
    sha256: str
    size: int
    metrics: dict[str, float | int]
    attempt: int | None = None
    time: float | None = None


# --- environment --------------------------------------------------------------------------


def _env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _env_path(name: str) -> Path | None:
    raw = os.environ.get(name, "")
    return Path(raw) if raw else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class _Session:
    """Everything the SDK knows about this process; built once from the environment."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.run_dir_env = _env_path(ENV_RUN_DIR)
        self.inside_portal = self.run_dir_env is not None
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1, minimum=1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.attempt = _env_int(ENV_ATTEMPT, 1, minimum=1)
        self.every_steps = _env_int(ENV_CHECKPOINT_EVERY_STEPS, 0)
        self.every_seconds = _env_int(ENV_CHECKPOINT_EVERY_SECONDS, 0)
        self.keep = _env_int(ENV_CHECKPOINT_KEEP, 0)
        self.params = self._read_params()
        self.started = datetime.datetime.now()
        local_id = "local-" + self.started.strftime("%Y%m%d-%H%M%S-%f")
        self.run_id = os.environ.get(ENV_RUN_ID) or local_id
        self._run_dir: Path | None = self.run_dir_env
        self._checkpoint_dir = _env_path(ENV_CHECKPOINT_DIR)
        self.metrics_fh: IO[str] | None = None
        self.metric_keys: dict[str, str] = {}
        self.events_fh: IO[str] | None = None
        self.last_checkpoint_time = time.monotonic()
        self.stop_requested = False
        self.previous_sigterm: _SignalHandler = None
        self.handler_installed = False
        self._install_sigterm()
        if self.rank == 0 and self._checkpoint_dir is not None:
            self._remove_stale_temps(self._checkpoint_dir)

    # -- set-up ---------------------------------------------------------------------------

    @staticmethod
    def _read_params() -> dict[str, Any]:
        raw = os.environ.get(ENV_PARAMS, "").strip()
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{ENV_PARAMS} is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{ENV_PARAMS} must be a JSON object, got {type(value).__name__}")
        return value

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            print(
                "trainyard: first used outside the main thread; SIGTERM handler not installed,"
                " call trainyard.init() from the main thread so should_stop() works",
                file=sys.stderr,
            )
            return
        self.previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self.handler_installed = True

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
        previous = self.previous_sigterm
        # Only Python-level handlers are chained: SIG_DFL would kill the process, which is
        # exactly what the handler exists to prevent.
        if callable(previous):
            previous(signum, frame)

    def restore_sigterm(self) -> None:
        if self.handler_installed and threading.current_thread() is threading.main_thread():
            previous = self.previous_sigterm
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            self.handler_installed = False

    def _remove_stale_temps(self, directory: Path) -> None:
        # A temp file left by an earlier attempt of this run was killed mid-save: nobody will
        # ever finish it. Temps of this attempt (or a later one) are left alone.
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return
        for entry in entries:
            match = _TEMP_NAME.match(entry.name)
            if match and int(match.group(1)) < self.attempt:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    # -- directories ----------------------------------------------------------------------

    def run_dir(self) -> Path:
        if self._run_dir is None:
            root = Path.cwd() / LOCAL_ROOT
            root.mkdir(parents=True, exist_ok=True)
            stamp = self.started.strftime("%Y%m%d-%H%M%S-%f")
            candidate = root / stamp
            suffix = 1
            while True:
                try:
                    candidate.mkdir()
                    break
                except FileExistsError:
                    suffix += 1
                    candidate = root / f"{stamp}-{suffix}"
            self._run_dir = candidate
        else:
            self._run_dir.mkdir(parents=True, exist_ok=True)
        return self._run_dir

    def checkpoint_dir(self) -> Path:
        if self._checkpoint_dir is None:
            self._checkpoint_dir = self.run_dir() / "checkpoints"
        self._checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return self._checkpoint_dir

    def existing_checkpoint_dir(self) -> Path | None:
        """The checkpoint dir if one is configured or already made; never creates anything."""
        if self._checkpoint_dir is not None:
            return self._checkpoint_dir
        if self._run_dir is not None:
            return self._run_dir / "checkpoints"
        return None

    # -- writing --------------------------------------------------------------------------

    def _open_append(self, name: str) -> IO[str]:
        # buffering=1 is line buffering: each line reaches the OS in one write() as soon as
        # its newline is written, without an fsync per line.
        return open(self.run_dir() / name, "a", buffering=1, encoding="utf-8")

    def write_metrics(self, line: str) -> None:
        with self.lock:
            if self.metrics_fh is None:
                self.metrics_fh = self._open_append(METRICS_FILE)
            self.metrics_fh.write(line)

    def write_event(self, event: dict[str, Any]) -> None:
        line = dumps(event) + "\n"
        with self.lock:
            if self.events_fh is None:
                self.events_fh = self._open_append(EVENTS_FILE)
            self.events_fh.write(line)

    def close(self) -> None:
        with self.lock:
            for fh in (self.metrics_fh, self.events_fh):
                if fh is not None:
                    fh.close()
            self.metrics_fh = None
            self.events_fh = None


class _Current:
    """The process's one session, built lazily under a lock."""

    lock = threading.Lock()
    session: _Session | None = None


def _session() -> _Session:
    session = _Current.session
    if session is None:
        with _Current.lock:
            if _Current.session is None:
                _Current.session = _Session()
            session = _Current.session
    return session


# --- public API: identity and environment ---------------------------------------------------


def init() -> None:
    """Read the environment and install the SIGTERM handler now (otherwise done on first use)."""
    _session()


def close() -> None:
    """Close the files and forget the session; the next call re-reads the environment.

    Also restores the SIGTERM handler found at start-up. Called automatically at exit.
    """
    with _Current.lock:
        session = _Current.session
        _Current.session = None
    if session is not None:
        session.close()
        session.restore_sigterm()


def in_portal() -> bool:
    """True when running under a Trainyard agent (``TRAINYARD_RUN_DIR`` is set)."""
    return _session().inside_portal


def run_id() -> str:
    """The run's id, or ``local-<timestamp>`` outside the portal."""
    return _session().run_id


def attempt() -> int:
    """The attempt number (1 for the first placement of the run)."""
    return _session().attempt


def rank() -> int:
    """The global rank of this process (``RANK``, default 0)."""
    return _session().rank


def world_size() -> int:
    """The number of processes in the job (``WORLD_SIZE``, default 1)."""
    return _session().world_size


def local_rank() -> int:
    """The rank of this process on its node (``LOCAL_RANK``, default 0)."""
    return _session().local_rank


def params() -> dict[str, Any]:
    """The run's parameters (a fresh copy each call; ``{}`` when none were given)."""
    return copy.deepcopy(_session().params)


def init_checkpoint() -> str | None:
    """The checkpoint of another run to start from (fine-tune, evaluate), if any."""
    return os.environ.get(ENV_INIT_CHECKPOINT) or None


def run_dir() -> Path:
    """This attempt's directory (created, locally, on first call)."""
    return _session().run_dir()


def checkpoint_dir() -> Path:
    """The run's checkpoint directory (created if missing)."""
    return _session().checkpoint_dir()


def should_stop() -> bool:
    """True once SIGTERM has arrived: checkpoint at the current step and exit 0."""
    return _session().stop_requested


# --- public API: metrics and events ---------------------------------------------------------


def log(step: int, **metrics: object) -> None:
    """Record metrics for ``step``: one line in ``metrics.jsonl`` (rank 0 only).

    Values are ints, floats, or anything with ``__float__`` (numpy scalars, 0-d tensors).
    """
    session = _Current.session or _session()
    step_value = step if type(step) is int and step >= 0 else as_step(step)
    if not metrics:
        raise ValueError("log() needs at least one metric")
    line = metrics_line(step_value, metrics, session.metric_keys)
    if session.rank != 0:
        return
    session.write_metrics(line)


def set_total_steps(total_steps: int) -> None:
    """Announce how many steps the run will take, so the portal can show progress."""
    session = _session()
    total = as_step(total_steps, "total_steps")
    if session.rank != 0:
        return
    session.write_event({"type": "progress", "total_steps": total, "time": time.time()})


def record_lineage(**data: object) -> None:
    """Record where this run came from: dataset fingerprint, seed, source checkpoint, ..."""
    session = _session()
    if not data:
        raise ValueError("record_lineage() needs at least one field")
    encoded = encode_json(data, "lineage")
    if session.rank != 0:
        return
    session.write_event({"type": "lineage", "data": encoded, "time": time.time()})


# --- public API: checkpoints ----------------------------------------------------------------


def checkpoint_due(step: int) -> bool:
    """Whether the checkpoint policy asks for a checkpoint after ``step`` completed steps.

    Due when ``step`` is a positive multiple of ``TRAINYARD_CHECKPOINT_EVERY_STEPS`` (multiples,
    not "N since the last", so a resumed attempt checkpoints at the same steps as an
    uninterrupted one), or when ``TRAINYARD_CHECKPOINT_EVERY_SECONDS`` have passed since the
    last ``checkpoint()`` of this process (or since start-up). The answer is computed on every
    rank; the time part is per process, so all_reduce it if your checkpoint needs all ranks.
    """
    session = _session()
    value = as_step(step)
    if session.every_steps > 0 and value > 0 and value % session.every_steps == 0:
        return True
    if session.every_seconds > 0:
        return time.monotonic() - session.last_checkpoint_time >= session.every_seconds
    return False


@contextlib.contextmanager
def checkpoint(step: int, metrics: Mapping[str, object] | None = None) -> Iterator[str]:
    """Write a checkpoint atomically: ``with checkpoint(step) as path: torch.save(state, path)``.

    ``path`` is a temp file in the checkpoint directory. On a clean exit from the block the
    file is fsync'd, renamed to ``ckpt-{step:010d}.pt``, the directory fsync'd, and a record
    appended to ``checkpoints.jsonl``; then keep-last-K is applied. If the block raises, the
    temp file is removed and nothing is recorded. On ranks other than 0 ``path`` is
    ``os.devnull`` and nothing is recorded (skip the save there if it is costly).
    """
    session = _session()
    step_value = as_step(step)
    encoded_metrics = encode_metrics(metrics or {})
    if session.rank != 0:
        yield os.devnull
        session.last_checkpoint_time = time.monotonic()
        return

    directory = session.checkpoint_dir()
    final_name = f"ckpt-{step_value:010d}.pt"
    temp = directory / f".ckpt-{step_value:010d}.a{session.attempt}.{secrets.token_hex(6)}.tmp"
    temp.touch(exist_ok=False)
    try:
        yield str(temp)
        if not temp.is_file():
            raise RuntimeError(f"checkpoint {final_name}: nothing was written to {temp}")
        size = temp.stat().st_size
        if size == 0:
            raise RuntimeError(f"checkpoint {final_name}: the file written is empty")
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, directory / final_name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    _fsync_dir(directory)
    sha256, size = _sha256_of(directory / final_name)
    record = {
        "step": step_value,
        "file": final_name,
        "size": size,
        "sha256": sha256,
        "metrics": encoded_metrics,
        "time": time.time(),
        "attempt": session.attempt,
    }
    index = directory / CHECKPOINTS_FILE
    with open(index, "a", encoding="utf-8") as fh:
        fh.write(dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(directory)
    session.last_checkpoint_time = time.monotonic()
    if session.keep > 0:
        _enforce_keep(session, directory, keep=session.keep, just_written=final_name)


def _read_records(directory: Path) -> list[dict[str, Any]]:
    """Well-formed records of ``checkpoints.jsonl``, oldest first; torn or bad lines skipped."""
    try:
        text = (directory / CHECKPOINTS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        name = record.get("file")
        if not isinstance(name, str) or not _CHECKPOINT_NAME.match(name):
            continue
        if not isinstance(record.get("sha256"), str):
            continue
        if not all(isinstance(record.get(k), int) and not isinstance(record.get(k), bool) for k in ("step", "size")):
            continue
        records.append(record)
    return records


def _enforce_keep(session: _Session, directory: Path, *, keep: int, just_written: str) -> None:
    records = _read_records(directory)
    # The K most recently recorded files that still exist; record order, not step order, so a
    # step rewritten by a later attempt counts as new.
    kept: list[str] = [just_written]
    for record in reversed(records):
        if len(kept) >= keep:
            break
        name = record["file"]
        if name not in kept and (directory / name).is_file():
            kept.append(name)
    keep_set = set(kept)
    for entry in os.scandir(directory):
        match = _CHECKPOINT_NAME.match(entry.name)
        if not match or entry.name in keep_set:
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        session.write_event(
            {
                "type": "checkpoint_deleted",
                "file": entry.name,
                "step": int(match.group(1)),
                "time": time.time(),
            }
        )


def latest_checkpoint() -> Checkpoint | None:
    """The newest recorded checkpoint whose file exists and matches its sha256, or None.

    Corrupt or missing files are skipped, falling back to older records. Reads only; any
    rank may call it, but in a multi-node job only rank 0's node is sure to hold the files.
    """
    directory = _session().existing_checkpoint_dir()
    if directory is None:
        return None
    for record in reversed(_read_records(directory)):
        path = directory / record["file"]
        try:
            if path.stat().st_size != record["size"]:
                continue
            sha256, _ = _sha256_of(path)
        except FileNotFoundError:
            continue
        if sha256 != record["sha256"]:
            continue
        raw_metrics = record.get("metrics")
        metrics: dict[str, float | int] = {}
        if isinstance(raw_metrics, dict):
            for key, value in raw_metrics.items():
                number = decode_number(value)
                if number is not None:
                    metrics[key] = number
        raw_attempt = record.get("attempt")
        raw_time = record.get("time")
        return Checkpoint(
            path=str(path),
            step=record["step"],
            sha256=sha256,
            size=record["size"],
            metrics=metrics,
            attempt=raw_attempt if isinstance(raw_attempt, int) else None,
            time=float(raw_time) if isinstance(raw_time, int | float) else None,
        )
    return None


def _close_at_exit() -> None:
    session = _Current.session
    if session is not None:
        session.close()


atexit.register(_close_at_exit)
