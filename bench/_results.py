"""What every bench writes to bench/results/<name>.json: its figures, and under "measured" the
commit they were measured on, the date and the machine (cores, load), so a figure can be traced to
its code and a figure taken on a busy machine told apart from one taken on a quiet one."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# bench_check.py sets this ("check-") so its reduced reruns never overwrite a full run's results.
RESULT_PREFIX_ENV = "TRAINYARD_BENCH_RESULT_PREFIX"


def _git(*argv: str) -> str:
    try:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _head() -> str | None:
    return _git("rev-parse", "HEAD").strip() or None


# The code a bench runs is what was checked out when it started: others may commit meanwhile.
_HEAD_AT_START = _head()


def measured() -> dict[str, Any]:
    """The commit the bench started on (and the tracked files that differ from it), the date
    (UTC) and the machine, now."""
    changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()]
    head = _head()
    return {
        "commit": _HEAD_AT_START,
        **({"commit_at_end": head} if head != _HEAD_AT_START else {}),
        "uncommitted_files": changed,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "load_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "host": platform.node(),
        "python": platform.python_version(),
    }


def write_result(name: str, figures: dict[str, Any], *, path: Path | None = None) -> Path:
    """bench/results/<name>.json (or `path`): the figures, with measured() beside them."""
    out = path or RESULTS / f"{os.environ.get(RESULT_PREFIX_ENV, '')}{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**figures, "measured": measured()}, indent=2, default=str) + "\n")
    return out


def stamp_file(path: Path) -> bool:
    """Adds measured() to a result its bench wrote without one (run_all does this after each
    bench); False when the file is not a JSON object or already says where it was measured."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict) or "measured" in doc:
        return False
    path.write_text(json.dumps({**doc, "measured": measured()}, indent=2, default=str) + "\n")
    return True
