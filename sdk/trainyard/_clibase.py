"""Shared parts of the CLI: exit codes, errors, the client from the stored config, and the
terminal output (tables, the progress bar)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from trainyard import _config
from trainyard.client import Client

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_SERVER, EXIT_REFUSED = 0, 1, 2, 3, 4, 5, 6
FINISHED = ("succeeded", "failed", "cancelled")


class CliError(Exception):
    def __init__(self, message: str, code: int, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.code, self.hint = message, code, hint


def _client(args: argparse.Namespace) -> Client:
    cfg = _config.config_load()
    server = getattr(args, "server", None) or cfg.server
    if not server or not cfg.token:
        raise CliError("not logged in", EXIT_AUTH, "run `trainyard login --server URL`")
    return Client(server, cfg.token, timeout=args.timeout)


def _out(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None, max_width: int = 60) -> None:
    out = out or sys.stdout
    cells = [[_cell(v) for v in row] for row in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    out.write("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _kv_pairs(items: Sequence[str], what: str, parse_json: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--{what} {item!r}: expected KEY=VALUE", EXIT_USAGE)
        value: Any = raw
        if parse_json:
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw  # not JSON: a plain string, so --param optimizer=adam works unquoted
        out[key.strip()] = value
    return out


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _run_result(status: str) -> int:
    return EXIT_OK if status == "succeeded" else EXIT_RUN_FAILED


class Progress:
    """A one-line progress bar on stderr: redrawn in place on a terminal, a line per change otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""

    def show(self, text: str) -> None:
        if text == self.last:
            return
        self.last = text
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def progress_line(run_id: int, status: str, progress: dict[str, Any], width: int = 24) -> str:
    done = int(progress.get("steps_done") or 0)
    total = progress.get("total_steps") or 0
    text = f"run {run_id} {status:<9}"
    if total:
        fraction = min(1.0, done / total)
        filled = int(round(fraction * width))
        text += f" [{'#' * filled}{'.' * (width - filled)}] {done}/{total} steps {fraction * 100:5.1f}%"
    elif done:
        text += f" {done} steps"
    rate = progress.get("steps_per_s")
    if rate:
        text += f"  {rate:.2f} steps/s"
    if total and status == "running":
        text += f"  ETA {_duration(progress.get('eta_s'))}"
    return text


def _metric_table(keys: list[dict[str, Any]]) -> None:
    _table(
        ["metric", "last", "min", "max", "mean", "last step", "count"],
        [[k["key"], k.get("last"), k.get("min"), k.get("max"), k.get("mean"), k.get("last_step"), k.get("count")] for k in keys],
    )
