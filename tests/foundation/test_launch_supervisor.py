"""`make run`'s supervisor (portal.launch) on small real processes, with the backoff shortened.

A component that exits is restarted with backoff and the terminal says so; the others keep
running; one that keeps crashing is called out and still restarted; a server waits for its port.
The whole stack under kill -9 is tests/foundation/test_make_run.py.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from portal import launch
from portal.launch import Component, Launcher, restart_delay


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Launcher:
    monkeypatch.setenv("TRAINYARD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setattr(launch, "RESTART_FIRST_S", 0.05)
    monkeypatch.setattr(launch, "RESTART_MAX_S", 0.2)
    return Launcher()


def _tick_until(launcher: Launcher, done: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the supervisor did not get there in time"
        launcher.tick(time.monotonic())
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_backoff_doubles_and_is_capped() -> None:
    assert [restart_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_a_crashing_component_is_restarted_and_called_out_while_the_others_run(
        launcher: Launcher, capsys: pytest.CaptureFixture[str]) -> None:
    steady = launcher.add("steady", lambda: ["sleep", "60"])
    launcher.add("crashy", lambda: ["sh", "-c", "exit 3"])
    crashy = launcher.components[1]
    try:
        _tick_until(launcher, lambda: crashy.restarts >= 6)
    finally:
        launcher.shutdown()
    out = capsys.readouterr().out
    exits = [line for line in out.splitlines() if line.startswith("crashy exited")]
    assert exits[:4] == ["crashy exited with code 3; restarting it in 0.05 s (restart 1)",
                         "crashy exited with code 3; restarting it in 0.1 s (restart 2)",
                         "crashy exited with code 3; restarting it in 0.2 s (restart 3)",
                         "crashy exited with code 3; restarting it in 0.2 s (restart 4)"], out
    assert "  restarted crashy (restart 1) pid " in out
    assert "crashy keeps crashing (5 times in the last 60 s); still restarting it" in out
    assert "steady exited" not in out, "one component's crash must leave the others alone"
    assert [line.split()[1] for line in out.splitlines() if line.startswith("  stopped ")] == ["crashy", "steady"]
    assert not _alive(steady.pid)


def test_backoff_starts_over_after_a_component_stayed_up(launcher: Launcher, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(launch, "STABLE_S", 0.2)
    launcher.add("slow", lambda: ["sleep", "0.3"])
    try:
        _tick_until(launcher, lambda: launcher.components[0].restarts >= 3)
    finally:
        launcher.shutdown()
    out = capsys.readouterr().out
    assert out.count("slow exited with code 0; restarting it in 0.05 s") == 3, out


def test_a_server_restarts_only_once_its_port_is_free(launcher: Launcher, capsys: pytest.CaptureFixture[str]) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    first = launcher.add("server", lambda: ["sleep", "60"], ("127.0.0.1", port))
    server: Component = launcher.components[0]
    try:
        os.kill(first.pid, 9)
        _tick_until(launcher, lambda: server.restart_at is not None)
        time.sleep(0.3)
        for _ in range(20):
            launcher.tick(time.monotonic())
            time.sleep(0.01)
        assert server.proc is first, "it was started again while its old port was still taken"
        holder.close()
        _tick_until(launcher, lambda: server.proc is not first)
    finally:
        holder.close()
        launcher.shutdown()
    out = capsys.readouterr().out
    assert "server exited with code -9 (SIGKILL); restarting it in 0.05 s (restart 1)" in out, out
