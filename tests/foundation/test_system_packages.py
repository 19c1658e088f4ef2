"""scripts/system-packages: the step `make test` and `.ci/run` share to have the system packages
the suite needs (Chromium for the browser tests) before anything runs.

The script is run for real here, against made-up packages whose files are missing, as root and
as an unprivileged user, and with apt-get taken off the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-packages"


def _run(*args: str, env: dict[str, str] | None = None, user: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(SCRIPT), *args]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env or dict(os.environ), check=False)


def test_all_present_prints_nothing_and_succeeds(tmp_path: Path) -> None:
    (tmp_path / "there").write_text("")
    done = _run("make test", f"somepkg:{tmp_path}/there", f"globbed:{tmp_path}/th*e")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


def test_without_apt_it_stops_naming_the_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id"):  # a PATH with no apt-get on it
        os.symlink(shutil.which(tool) or f"/usr/bin/{tool}", bin_dir / tool)
    done = _run("make test", f"chromium-made-up:{tmp_path}/nothing", env={"PATH": str(bin_dir)})
    assert done.returncode == 2
    assert done.stdout == ""
    assert "make test needs chromium-made-up (not installed)" in done.stderr
    assert "apt-get install -y chromium-made-up" in done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root to run the script as another user")
def test_not_root_stops_before_installing() -> None:
    # The script comes on stdin: nobody may not traverse the test's temporary folders.
    done = subprocess.run(["runuser", "-u", "nobody", "--", "bash", "-s", "--", "make test", "made-up-pkg:/nonexistent/x"],
                          input=SCRIPT.read_text(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "sudo apt-get install -y made-up-pkg" in done.stderr


def test_make_test_and_ci_share_the_step() -> None:
    makefile = (ROOT / "Makefile").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "TEST_PACKAGES := chromium:/usr/bin/chromium docker-compose:/usr/bin/docker-compose" in makefile
    assert "test: test-packages" in makefile
    assert "scripts/system-packages" in makefile and "make test-packages" in ci and "scripts/system-packages" in ci
    assert "apt-get install" not in ci  # CI installs through the shared step only
