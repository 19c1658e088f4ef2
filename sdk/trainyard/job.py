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
``TRAINYARD_CHECKPOINT_KEEP_BEST``      optional ``metric:min`` or ``metric:max``: with KEEP, also
                                        keep the checkpoint whose recorded ``metric`` is best.
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

``$TRAINYARD_RUN_DIR/artifacts/<name>`` and ``$TRAINYARD_RUN_DIR/artifacts.jsonl`` -- files
logged with ``log_artifact()``: each is copied (whole, through a dot-named temp file) to
``artifacts/<name>``, then one record is appended (and fsync'd)::

    {"name": "plots/loss.png", "file": "artifacts/plots/loss.png", "size": 1234, "sha256": "<64 hex>", "time": t}

``name`` is a relative path (no leading ``/``, no ``..``, ``.`` or empty segments, no control
characters, at most 500 characters). The same name logged again replaces the file; the agent
ships what the file holds when it reads the record, and a record whose file no longer has the
recorded size is skipped (a later record of the same name follows).

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

import contextlib
import copy
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# The mechanics live in private modules, one concern each: _job_context (the environment,
# directories and SIGTERM), _job_sink (metrics.jsonl and events.jsonl) and _job_checkpoints (the
# checkpoint directory). This module is the public API; `NAME as NAME` re-exports the protocol's
# names that scripts and tests have always read from trainyard.job.
from trainyard import _job_artifacts
from trainyard._encoding import as_step, encode_json, encode_metrics, metrics_line
from trainyard._job_checkpoints import CHECKPOINTS_FILE as CHECKPOINTS_FILE
from trainyard._job_checkpoints import Checkpoint, commit, enforce_keep, file_name, find_latest
from trainyard._job_context import ENV_ATTEMPT as ENV_ATTEMPT
from trainyard._job_context import ENV_CHECKPOINT_DIR as ENV_CHECKPOINT_DIR
from trainyard._job_context import ENV_CHECKPOINT_EVERY_SECONDS as ENV_CHECKPOINT_EVERY_SECONDS
from trainyard._job_context import ENV_CHECKPOINT_EVERY_STEPS as ENV_CHECKPOINT_EVERY_STEPS
from trainyard._job_context import ENV_CHECKPOINT_KEEP as ENV_CHECKPOINT_KEEP
from trainyard._job_context import ENV_CHECKPOINT_KEEP_BEST as ENV_CHECKPOINT_KEEP_BEST
from trainyard._job_context import ENV_INIT_CHECKPOINT, forget_session
from trainyard._job_context import ENV_PARAMS as ENV_PARAMS
from trainyard._job_context import ENV_RUN_DIR as ENV_RUN_DIR
from trainyard._job_context import ENV_RUN_ID as ENV_RUN_ID
from trainyard._job_context import LOCAL_ROOT as LOCAL_ROOT
from trainyard._job_context import Current as _Current
from trainyard._job_context import get_session as _session
from trainyard._job_sink import EVENTS_FILE as EVENTS_FILE
from trainyard._job_sink import METRICS_FILE as METRICS_FILE

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
    "log_artifact",
    "params",
    "rank",
    "record_lineage",
    "run_dir",
    "run_id",
    "set_total_steps",
    "should_stop",
    "world_size",
]


# --- public API: identity and environment ---------------------------------------------------


def init() -> None:
    """Read the environment and install the SIGTERM handler now (otherwise done on first use)."""
    _session()


def close() -> None:
    """Close the files and forget the session; the next call re-reads the environment.

    Also restores the SIGTERM handler found at start-up. Called automatically at exit.
    """
    forget_session()


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
    sink = session.sink
    line = metrics_line(step_value, metrics, sink.metric_keys)
    if session.rank != 0:
        return
    sink.write_metrics(line)


def set_total_steps(total_steps: int) -> None:
    """Announce how many steps the run will take, so the portal can show progress."""
    session = _session()
    total = as_step(total_steps, "total_steps")
    if session.rank != 0:
        return
    session.sink.write_event({"type": "progress", "total_steps": total, "time": time.time()})


def record_lineage(**data: object) -> None:
    """Record where this run came from: dataset fingerprint, seed, source checkpoint, ..."""
    session = _session()
    if not data:
        raise ValueError("record_lineage() needs at least one field")
    encoded = encode_json(data, "lineage")
    if session.rank != 0:
        return
    session.sink.write_event({"type": "lineage", "data": encoded, "time": time.time()})


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
    with commit(directory, step_value, attempt=session.attempt, metrics=encoded_metrics) as path:
        yield path
    session.last_checkpoint_time = time.monotonic()
    if session.keep > 0:

        def say_deleted(name: str, deleted_step: int) -> None:
            session.sink.write_event({"type": "checkpoint_deleted", "file": name, "step": deleted_step, "time": time.time()})

        enforce_keep(directory, keep=session.keep, just_written=file_name(step_value), on_deleted=say_deleted,
                     best=session.keep_best)


def latest_checkpoint() -> Checkpoint | None:
    """The newest recorded checkpoint whose file exists and matches its sha256, or None.

    Corrupt or missing files are skipped, falling back to older records. Reads only; any
    rank may call it, but in a multi-node job only rank 0's node is sure to hold the files.
    """
    directory = _session().existing_checkpoint_dir()
    if directory is None:
        return None
    return find_latest(directory)


# --- public API: artifacts ------------------------------------------------------------------


def log_artifact(path: str | os.PathLike[str], name: str | None = None) -> list[str]:
    """Keep a file or a whole folder with the run (plots, tables, model files), as ``name``.

    A file is stored as ``name`` (default: its own name); a folder's files keep their relative
    layout under ``name`` (default: the folder's name), so ``log_artifact("plots")`` stores
    ``plots/loss.png``. The same name logged again replaces the earlier file. The bytes are
    copied at once, so the job may change or delete its own copy afterwards. Returns the names
    stored; on ranks other than 0 nothing is stored (the names are still checked) and [] is
    returned. Outside the portal the files land in the local folder (see :func:`run_dir`).
    """
    session = _session()
    pairs = _job_artifacts.plan(Path(path), name)
    if session.rank != 0:
        return []
    run = session.run_dir()
    return [str(_job_artifacts.store(run, source, artifact_name)["name"]) for source, artifact_name in pairs]
