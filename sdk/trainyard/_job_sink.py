"""The run directory's two line files, ``metrics.jsonl`` and ``events.jsonl`` (their format is
in :mod:`trainyard.job`): one append handle each, opened on the first line written.

Standard library only, like the rest of the in-job SDK.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trainyard._encoding import dumps

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"


class LineSink:
    """Appends whole lines to the run directory's files; ``run_dir`` makes the directory on demand."""

    def __init__(self, run_dir: Callable[[], Path]) -> None:
        self._run_dir = run_dir
        self.lock = threading.Lock()
        self.metrics_fh: IO[str] | None = None
        self.events_fh: IO[str] | None = None
        # Metric keys already validated and JSON-quoted (see trainyard._encoding.json_key).
        self.metric_keys: dict[str, str] = {}

    def _open_append(self, name: str) -> IO[str]:
        # buffering=1 is line buffering: each line reaches the OS in one write() as soon as
        # its newline is written, without an fsync per line.
        return open(self._run_dir() / name, "a", buffering=1, encoding="utf-8")

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
