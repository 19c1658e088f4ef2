"""The run context of a job process: what the agent's environment says (identity, ranks,
parameters, checkpoint policy), where the run's directories are, and the SIGTERM flag.

Built once per process, lazily, by :func:`get_session`; :mod:`trainyard.job` documents the
environment variables and is the public face of all this. Standard library only, like the rest
of the in-job SDK.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from trainyard._job_checkpoints import remove_stale_temps
from trainyard._job_sink import LineSink

ENV_RUN_ID = "TRAINYARD_RUN_ID"
ENV_ATTEMPT = "TRAINYARD_ATTEMPT"
ENV_RUN_DIR = "TRAINYARD_RUN_DIR"
ENV_CHECKPOINT_DIR = "TRAINYARD_CHECKPOINT_DIR"
ENV_PARAMS = "TRAINYARD_PARAMS"
ENV_CHECKPOINT_EVERY_STEPS = "TRAINYARD_CHECKPOINT_EVERY_STEPS"
ENV_CHECKPOINT_EVERY_SECONDS = "TRAINYARD_CHECKPOINT_EVERY_SECONDS"
ENV_CHECKPOINT_KEEP = "TRAINYARD_CHECKPOINT_KEEP"
ENV_CHECKPOINT_KEEP_BEST = "TRAINYARD_CHECKPOINT_KEEP_BEST"
ENV_INIT_CHECKPOINT = "TRAINYARD_INIT_CHECKPOINT"

LOCAL_ROOT = "trainyard-local"


def env_int(name: str, default: int, minimum: int = 0) -> int:
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


def env_path(name: str) -> Path | None:
    raw = os.environ.get(name, "")
    return Path(raw) if raw else None


def env_best(name: str) -> tuple[str, str] | None:
    """``metric:min`` or ``metric:max`` (the checkpoint to keep besides the last K), or None."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    metric, _, mode = raw.rpartition(":")
    if not metric or mode not in ("min", "max"):
        raise ValueError(f"{name} must be 'metric:min' or 'metric:max', got {raw!r}")
    return metric, mode


def read_params() -> dict[str, Any]:
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


SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Session:
    """Everything the SDK knows about this process; built once from the environment."""

    def __init__(self) -> None:
        self.run_dir_env = env_path(ENV_RUN_DIR)
        self.inside_portal = self.run_dir_env is not None
        self.rank = env_int("RANK", 0)
        self.world_size = env_int("WORLD_SIZE", 1, minimum=1)
        self.local_rank = env_int("LOCAL_RANK", 0)
        self.attempt = env_int(ENV_ATTEMPT, 1, minimum=1)
        self.every_steps = env_int(ENV_CHECKPOINT_EVERY_STEPS, 0)
        self.every_seconds = env_int(ENV_CHECKPOINT_EVERY_SECONDS, 0)
        self.keep = env_int(ENV_CHECKPOINT_KEEP, 0)
        self.keep_best = env_best(ENV_CHECKPOINT_KEEP_BEST)
        self.params = read_params()
        self.started = datetime.datetime.now()
        local_id = "local-" + self.started.strftime("%Y%m%d-%H%M%S-%f")
        self.run_id = os.environ.get(ENV_RUN_ID) or local_id
        self._run_dir: Path | None = self.run_dir_env
        self._checkpoint_dir = env_path(ENV_CHECKPOINT_DIR)
        self.sink = LineSink(self.run_dir)
        self.last_checkpoint_time = time.monotonic()
        self.stop_requested = False
        self.previous_sigterm: SignalHandler = None
        self.handler_installed = False
        self._install_sigterm()
        if self.rank == 0 and self._checkpoint_dir is not None:
            remove_stale_temps(self._checkpoint_dir, self.attempt)

    # -- SIGTERM --------------------------------------------------------------------------

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

    def close(self) -> None:
        self.sink.close()


class Current:
    """The process's one session, built lazily under a lock."""

    lock = threading.Lock()
    session: Session | None = None


def get_session() -> Session:
    session = Current.session
    if session is None:
        with Current.lock:
            if Current.session is None:
                Current.session = Session()
            session = Current.session
    return session


def forget_session() -> None:
    """Closes the files, restores the SIGTERM handler and drops the session."""
    with Current.lock:
        session = Current.session
        Current.session = None
    if session is not None:
        session.close()
        session.restore_sigterm()


def _close_at_exit() -> None:
    session = Current.session
    if session is not None:
        session.close()


atexit.register(_close_at_exit)
