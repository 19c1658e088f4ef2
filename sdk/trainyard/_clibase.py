"""Shared parts of the CLI: exit codes, errors, the client from the stored config, and the
terminal output (tables, the progress bar)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from trainyard import _config
from trainyard.client import ApiError, AuthError, Client, ConnectionFailed, NotTheApi, ServerError, ValidationError

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_SERVER, EXIT_REFUSED = 0, 1, 2, 3, 4, 5, 6
EXIT_TIMEOUT = 7  # --timeout-wait ran out: the run goes on, so neither a failure nor a server error
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
FINISHED = ("succeeded", "failed", "cancelled")


class CliError(Exception):
    def __init__(self, message: str, code: int, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.code, self.hint = message, code, hint


RUN_COMMANDS = ("show", "logs", "metrics", "keys", "checkpoints", "cancel")


def _not_found(args: argparse.Namespace) -> tuple[str, str] | None:
    """What a 404 was about, from the command and its arguments (the API says only "Not found."),
    with a hint that fits it; None when the command has no one subject."""
    another = "(or it belongs to another team)"
    command = getattr(args, "cmd", None)
    if command in RUN_COMMANDS:
        return f"run {args.run} not found {another}", "`trainyard runs` lists the runs you can see"
    if command == "compare":
        runs = ", ".join(str(r) for r in args.runs)
        return f"one of runs {runs} not found {another}", "`trainyard runs` lists the runs you can see"
    if command == "budget":
        return f"project {args.project} not found {another}", "give the project's id or team/project, e.g. vision/digits"
    return None


def _all_no_such(err: ApiError) -> bool:
    """A 400 whose every field says "no such ..." names something missing (a project, template
    or run given by reference): that is not found, as the exit codes promise, not a refusal."""
    messages = [m for msgs in err.fields.values() for m in msgs]
    return bool(messages) and all(m.strip().lower().startswith("no such") for m in messages)


def api_error_exit(err: ApiError, args: argparse.Namespace) -> tuple[int, str, str]:
    """(exit code, message, hint) for an error the API answered."""
    message = str(err)
    if isinstance(err, AuthError):
        return EXIT_AUTH, message, "run `trainyard login --server URL` again (the token may be revoked)"
    if err.code == "invalid_credentials":
        return EXIT_AUTH, message, ""
    if isinstance(err, NotTheApi):
        return EXIT_SERVER, message, ""  # the message says what to check
    if err.status == 404:
        subject = _not_found(args)
        if subject:
            return EXIT_NOT_FOUND, subject[0], subject[1]
        return EXIT_NOT_FOUND, message, "another team's objects read as not found"
    if isinstance(err, (ServerError, ConnectionFailed)) or err.status >= 500 or err.status == 0:
        return EXIT_SERVER, message, "check the server URL (`trainyard login --server URL`) and that the portal is up"
    if isinstance(err, ValidationError) and _all_no_such(err):
        return EXIT_NOT_FOUND, message, ""
    return EXIT_REFUSED, message, ""


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
    if isinstance(value, bool):
        return "yes" if value else "no"
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
    """Seconds with units (12s, 2m33s, 1h02m, 3d04h): "30:00" could be minutes or hours."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _parse_time(at: str) -> datetime | None:
    try:
        # fromisoformat takes no "Z" before Python 3.11.
        when = datetime.fromisoformat(at.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    # The API speaks UTC; a time without an offset is UTC too, never the reader's local time.
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)  # noqa: UP017 (datetime.UTC is 3.11+)


def _local_time(at: str | None) -> str | None:
    """An API time (ISO, UTC) as the reader's local 'YYYY-MM-DD HH:MM:SS'; None stays None and
    a text that is not a time is shown as it came."""
    if not at:
        return None
    when = _parse_time(str(at))
    return f"{when.astimezone():%Y-%m-%d %H:%M:%S}" if when else str(at)


def _significant(value: float, digits: int = 3) -> str:
    """A number with `digits` significant digits and no exponent (0.0117, not 1.17e-02)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def _size(size: int | None) -> str | None:
    if size is None:
        return None
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _energy(kwh: float | None) -> str | None:
    """kWh from 1 kWh up; Wh below, where a job's few joules would read 1.16758e-05 kWh."""
    if kwh is None:
        return None
    return f"{kwh:,.2f} kWh" if kwh >= 1 else f"{_significant(kwh * 1000)} Wh"


def _money(amount: Any, currency: str | None) -> str | None:
    if amount is None:
        return None
    return f"{amount} {currency}" if currency else str(amount)


def _scalar(value: Any) -> str:
    """A parameter or tag value as it is written in JSON (true, null, [0, 1]), strings bare."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _pairs(mapping: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{key}={_scalar(value)}" for key, value in sorted((mapping or {}).items()))


def is_sweep(run: Mapping[str, Any]) -> bool:
    """A sweep's parent: it holds no devices and its progress counts child runs, not steps."""
    return bool(run.get("children")) or (run.get("resources") or {}).get("devices_per_node") == 0


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


def progress_line(run_id: int, status: str, progress: dict[str, Any], width: int = 24, unit: str = "steps") -> str:
    """One line of progress; `unit` is "runs" for a sweep's parent, whose steps are its finished children."""
    done = int(progress.get("steps_done") or 0)
    total = progress.get("total_steps") or 0
    text = f"run {run_id} {status:<9}"
    if total:
        fraction = min(1.0, done / total)
        filled = int(round(fraction * width))
        text += f" [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {unit} {fraction * 100:5.1f}%"
    elif done:
        text += f" {done} {unit}"
    rate = progress.get("steps_per_s")
    if rate and unit == "steps":  # children finishing per second is no rate anyone reads
        text += f"  {rate:.2f} steps/s"
    if total and status == "running":
        eta = progress.get("eta_s")
        if eta is None and rate:
            # The server leaves eta_s out until its rate settles; the shown rate is still a fair guess.
            eta = max(0, total - done) / rate
        text += f"  ETA {_duration(eta)}"
    return text


def _metric_table(keys: list[dict[str, Any]]) -> None:
    _table(
        ["metric", "last", "min", "max", "mean", "last step", "count"],
        [[k["key"], k.get("last"), k.get("min"), k.get("max"), k.get("mean"), k.get("last_step"), k.get("count")] for k in keys],
    )
