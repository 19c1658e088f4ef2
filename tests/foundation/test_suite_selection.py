"""CI's SQLite pass runs `--database-only` (tests/conftest.py): a test that uses no database cannot
differ by database, so it runs once, on the PostgreSQL pass. What it keeps and what it drops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ("tests/foundation/test_bootstrap.py", "tests/scheduling/test_core.py", "tests/foundation/test_audit.py",
         "tests/agents/test_agent_recovery.py")


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", *args, *FILES],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_database_only_drops_the_tests_without_a_database_and_keeps_the_rest() -> None:
    everything, kept = _collected(), _collected("--database-only")
    dropped = everything - kept
    assert kept < everything
    # The scheduler's core is pure: none of it is kept.
    assert not {t for t in kept if t.startswith("tests/scheduling/test_core.py")}
    # A test with the db fixture (through the cast) is kept; a pure helper test beside it is not.
    assert "tests/foundation/test_audit.py::test_audit_page_shows_changes_field_by_field" in dropped
    assert any(t.startswith("tests/foundation/test_audit.py") for t in kept)
    # A database outside pytest-django's (marker `database`), and a live stack's, are kept.
    assert "tests/foundation/test_bootstrap.py::test_bootstrap_on_an_empty_database_then_again" in kept
    assert {t for t in everything if t.startswith("tests/agents/test_agent_recovery.py")} <= kept
