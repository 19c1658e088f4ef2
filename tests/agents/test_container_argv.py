"""The `docker run` the agent builds in container mode (no engine needed; the live run is
tests/agents/test_container_live.py): secrets never on its command line, only the attempt's
folders writable, code read-only, the pool's network, a non-root user, limits, GPUs by UUID."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import container
from agents.config import parse_args

IMAGE = container.Image(name="trainyard/digits:1", digest="sha256:" + "ab" * 32, id="sha256:" + "cd" * 32)


def _launch(**changes: object) -> container.Launch:
    fields: dict[str, object] = {
        "name": "ty-abc123-a7-r0", "image": IMAGE, "user": (1234, 1234), "workdir": Path("/w/runs/3/a1-r0/job"),
        "writable": (Path("/w/runs/3/a1-r0"), Path("/w/runs/3/checkpoints")),
        "readable": container.readable_mounts(Path(__file__).resolve().parents[2], container.Settings()),
        "env": {"TY_SECRET": "tysec-hush", "PATH": "/host/bin", "PYTHONPATH": "/host/repo", "TRAINYARD_RUN_ID": "3"},
        "command": ("python3", "-m", "agents.launch", "/w/runs/3/a1-r0/agent/plan.json"), "memory_bytes": 2 << 30, "cpus": 1.5,
    }
    fields.update(changes)
    return container.Launch(**fields)  # type: ignore[arg-type]


def test_the_container_gets_its_folders_limits_user_and_no_network_and_no_secret_on_its_command_line() -> None:
    docker = container.Docker(container.Settings(cli="/usr/bin/docker", host="unix:///tmp/d.sock"))
    argv, env = container.run_argv(docker, _launch())
    line = " ".join(argv)
    assert "tysec-hush" not in line and env["TY_SECRET"] == "tysec-hush"
    assert ["--env", "TY_SECRET"] == argv[argv.index("TY_SECRET") - 1:argv.index("TY_SECRET") + 1]
    assert argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--user") + 1] == "1234:1234"
    assert argv[argv.index("--memory") + 1] == str(2 << 30) == argv[argv.index("--memory-swap") + 1]
    assert argv[argv.index("--cpus") + 1] == "1.5"
    assert "--cap-drop" in argv and "no-new-privileges" in argv
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert "type=bind,source=/w/runs/3/a1-r0,target=/w/runs/3/a1-r0" in mounts
    assert all(m.endswith(",readonly") for m in mounts if "/opt/trainyard" in m)
    assert {m.split("target=")[1].split(",")[0] for m in mounts if "/opt/trainyard" in m} == {
        "/opt/trainyard/agents", "/opt/trainyard/sdk", "/opt/trainyard/recipes"}
    assert "PATH" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--env"], "the image keeps its own PATH"
    assert env["PYTHONPATH"] == "/opt/trainyard:/opt/trainyard/sdk"
    assert env["DOCKER_HOST"] == "unix:///tmp/d.sock"
    assert argv[-5:] == [IMAGE.id, "python3", "-m", "agents.launch", "/w/runs/3/a1-r0/agent/plan.json"]
    assert "--gpus" not in argv


def test_gpus_go_by_uuid_with_the_nvidia_runtime_only() -> None:
    docker = container.Docker(container.Settings())
    docker._nvidia = False  # what `docker info` would say: no NVIDIA runtime on this engine (no GPU here)
    with pytest.raises(container.ContainerError, match="no NVIDIA runtime"):
        container.run_argv(docker, _launch(gpus=("GPU-1", "GPU-2")))
    docker._nvidia = True
    argv, _ = container.run_argv(docker, _launch(gpus=("GPU-1", "GPU-2")))
    assert argv[argv.index("--gpus") + 1] == '"device=GPU-1,GPU-2"' and argv[argv.index("--runtime") + 1] == "nvidia"


def test_the_agent_takes_container_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    config = parse_args(["--isolation", "docker", "--container-network", "host", "--container-mount", "/opt/tools:/tools,/data",
                         "--container-pythonpath", "/tools/site", "--docker-host", "unix:///run/d.sock"])
    assert config.isolation == "docker"
    assert config.container.network == "host" and config.container.host == "unix:///run/d.sock"
    assert config.container.mounts == (("/opt/tools", "/tools"), ("/data", "/data"))
    assert config.container.pythonpath == ("/tools/site",)
    with pytest.raises(ValueError, match="absolute host path"):
        container.mounts_parse("relative/dir")
