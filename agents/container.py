"""Container mode (``--isolation docker``): each attempt's launcher runs in ``docker run``.

The container gets its template's approved image (checked here by digest), a non-root user, the
attempt's folders (run directory, checkpoints, the agent's log folder for it) at the same paths
as outside, the code the launcher and SDK need read-only, its memory and CPU limits, its GPUs by
UUID (with the NVIDIA runtime), and the pool's network (``none`` by default). The SDK inside
writes metrics and checkpoints to the run directory; the agent's shipper reads them outside.
Environment values go to the docker CLI's own environment (``-e NAME``), never its command line.
Standard library only: the docker CLI does the talking.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents import protocol

log = logging.getLogger("agents.container")
DOCKER_TIMEOUT_S = 120.0
PULL_TIMEOUT_S = 1800.0
NETWORKS = ("none", "host", "bridge")
# What of the job's environment stays outside: the host's paths and loader settings mean nothing
# in the image (its own PATH applies).
HOST_ONLY_ENV = {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "SHELL", "PYTHONHOME"}
# Where the agent's code (launcher, SDK, shipped recipes) appears inside a container, whatever the
# host's path (an image's user may not pass through the host's, e.g. under /root).
CODE_ROOT = "/opt/trainyard"
Mount = tuple[str, str]  # (host path, path in the container)


class ContainerError(Exception):
    """The job cannot start in its container; the message says why, for the run's page."""


@dataclass(frozen=True)
class Image:
    name: str
    digest: str
    id: str  # what `docker run` is given: immutable, unlike a tag

    def lineage(self) -> dict[str, str]:
        return {"image": self.name, "digest": self.digest, "image_id": self.id}


@dataclass(frozen=True)
class Settings:
    cli: str = "docker"
    host: str = ""  # DOCKER_HOST; empty: the CLI's default
    network: str = "none"
    python: str = "python3"  # the interpreter inside the image for the launcher and `python` entrypoints
    mounts: tuple[Mount, ...] = ()  # host folders mounted read-only (a shared toolchain, datasets)
    pythonpath: tuple[str, ...] = ()  # in-container folders added to the jobs' PYTHONPATH


def mounts_parse(text: str) -> tuple[Mount, ...]:
    """``SRC[:DST],...``: DST defaults to SRC. Raises ValueError naming a bad entry."""
    out: list[Mount] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        src, _, dst = item.partition(":")
        dst = dst or src
        if not os.path.isabs(src) or not os.path.isabs(dst) or "," in dst:
            raise ValueError(f"{item!r}: each mount is an absolute host path, optionally :an absolute path inside")
        out.append((os.path.realpath(src), dst))
    return tuple(out)


@dataclass
class Docker:
    settings: Settings
    _nvidia: bool | None = field(default=None, init=False)

    def env(self, job: Mapping[str, str] | None = None) -> dict[str, str]:
        """The docker CLI's environment: its own settings, and the job's variables it forwards
        (``--env NAME``; the job's HOME wins over the agent's, so the CLI's config is named outright)."""
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")}
        base["DOCKER_CONFIG"] = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
        if self.settings.host:
            base["DOCKER_HOST"] = self.settings.host
        elif "DOCKER_HOST" in os.environ:
            base["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
        forwarded = {k: v for k, v in (job or {}).items() if not k.startswith("DOCKER_")}
        return {**base, **forwarded}

    def cli(self, *args: str, timeout: float = DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([self.settings.cli, *args], env=self.env(), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as err:
            raise ContainerError(f"docker {args[0]} failed: {err}") from err

    def problem(self) -> str:
        """Why containers cannot run here ("" when they can)."""
        try:
            done = self.cli("version", "--format", "{{.Server.Version}}", timeout=30)
        except ContainerError as err:
            return str(err)
        return "" if done.returncode == 0 else f"the Docker engine does not answer: {done.stderr.strip()[-500:]}"

    def nvidia(self) -> bool:
        if self._nvidia is None:
            done = self.cli("info", "--format", "{{json .Runtimes}}", timeout=30)
            self._nvidia = done.returncode == 0 and "nvidia" in done.stdout
        return self._nvidia

    def _inspect(self, ref: str) -> dict[str, object] | None:
        done = self.cli("image", "inspect", "--format", "{{json .}}", ref)
        if done.returncode != 0:
            return None
        try:
            data = json.loads(done.stdout)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def image_resolve(self, ref: protocol.ImageRef) -> Image:
        """The approved image, found here by its digest (an image id, or a registry digest of
        ``name``), pulled by digest when missing. A tag that now points elsewhere does not count."""
        name, digest = ref["name"], ref["digest"]
        for attempt in ("local", "pulled"):
            for candidate in (digest, f"{name}@{digest}"):
                data = self._inspect(candidate)
                if data is None:
                    continue
                repo_digests = [str(d).rpartition("@")[2] for d in data.get("RepoDigests") or []]  # type: ignore[attr-defined]
                if data.get("Id") == digest or digest in repo_digests:
                    return Image(name=name, digest=digest, id=str(data["Id"]))
            if attempt == "local":
                pulled = self.cli("pull", "--quiet", f"{name}@{digest}", timeout=PULL_TIMEOUT_S)
                if pulled.returncode != 0:
                    raise ContainerError(f"the approved image {name}@{digest} is not on this node and could not be pulled: "
                                         f"{pulled.stderr.strip()[-300:]}")
        raise ContainerError(f"no image on this node has the approved digest {digest} of {name}")

    def oom_killed(self, name: str) -> bool:
        done = self.cli("container", "inspect", "--format", "{{.State.OOMKilled}}", name, timeout=30)
        return done.returncode == 0 and done.stdout.strip() == "true"

    def remove(self, name: str) -> None:
        done = self.cli("rm", "--force", "--volumes", name, timeout=60)
        if done.returncode != 0 and "No such container" not in done.stderr:
            log.error("cannot remove container %s: %s", name, done.stderr.strip())

    def leftovers(self, prefix: str) -> list[str]:
        done = self.cli("ps", "--all", "--format", "{{.Names}}", "--filter", f"name=^{prefix}")
        return sorted(n for n in done.stdout.split() if n.startswith(prefix)) if done.returncode == 0 else []


@dataclass
class Container:
    """One attempt's container on this node, for the runner to check and remove after it exits."""

    name: str
    memory_bytes: int
    docker: Docker
    init_pid: int = 0  # the host's pid of its first process, once it runs

    def pid(self) -> int:
        """The host's pid of the container's first process (the launcher), 0 until it runs: the
        monitor counts its tree's CPU time, and the runner's stop signals reach it directly."""
        if not self.init_pid:
            try:
                done = self.docker.cli("container", "inspect", "--format", "{{.State.Pid}}", self.name, timeout=10)
            except ContainerError:
                return 0
            text = done.stdout.strip()
            self.init_pid = int(text) if done.returncode == 0 and text.isdigit() else 0
        return self.init_pid

    def oom_kills(self) -> int:
        return 1 if self.docker.oom_killed(self.name) else 0

    def remove(self) -> None:
        self.docker.remove(self.name)


@dataclass(frozen=True)
class Launch:
    """What one `docker run` needs (a frozen value instead of a long keyword list)."""

    name: str
    image: Image
    user: tuple[int, int]
    workdir: Path
    writable: tuple[Path, ...]  # the attempt's folders, mounted read-write at the same path
    readable: tuple[Mount, ...]  # code and toolchains, read-only
    env: Mapping[str, str]
    command: tuple[str, ...]
    memory_bytes: int = 0
    cpus: float = 0.0
    gpus: tuple[str, ...] = ()  # UUIDs


def run_argv(docker: Docker, launch: Launch) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the docker CLI process that runs the container in the foreground:
    the CLI forwards the agent's signals to the launcher and exits with it."""
    s = docker.settings
    argv = [s.cli, "run", "--name", launch.name, "--label", "trainyard.attempt=" + launch.name, "--network", s.network,
            "--user", f"{launch.user[0]}:{launch.user[1]}", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--pids-limit", "4096", "--shm-size", "1g", "--workdir", str(launch.workdir), "--sig-proxy=true"]
    if launch.memory_bytes:
        argv += ["--memory", str(launch.memory_bytes), "--memory-swap", str(launch.memory_bytes)]
    if launch.cpus:
        argv += ["--cpus", f"{launch.cpus:g}"]
    if launch.gpus:
        if not docker.nvidia():
            raise ContainerError("this job holds GPUs, but this node's Docker engine has no NVIDIA runtime "
                                 "(nvidia-container-toolkit): its container could not see them")
        argv += ["--runtime", "nvidia", "--gpus", f'"device={",".join(launch.gpus)}"']
    for path in launch.writable:
        argv += ["--mount", f"type=bind,source={path},target={path}"]
    for src, dst in launch.readable:
        argv += ["--mount", f"type=bind,source={src},target={dst},readonly"]
    env = {k: v for k, v in launch.env.items() if k not in HOST_ONLY_ENV and not k.startswith("DOCKER_")}
    env["PYTHONPATH"] = os.pathsep.join([CODE_ROOT, f"{CODE_ROOT}/sdk", *s.pythonpath])
    for name in sorted(env):
        argv += ["--env", name]  # the value comes from the CLI's environment: never on a command line
    argv += [launch.image.id, *launch.command]
    return argv, docker.env(env)


def readable_mounts(repo: Path, settings: Settings) -> tuple[Mount, ...]:
    """The agent's code a job needs in its container (the launcher, the SDK, the shipped recipes;
    never the repository root: under make run the agent's workdir is in it), and the admin's mounts."""
    code = tuple((str(repo / d), f"{CODE_ROOT}/{d}") for d in ("agents", "sdk", "recipes") if (repo / d).is_dir())
    return code + settings.mounts


def probe_argv(docker: Docker, *, name: str, image: Image, user: tuple[int, int], readable: tuple[Mount, ...],
               env: Mapping[str, str], gpus: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """A short-lived container like the job's, for the lineage probe (agents.lineage adds `-c PROBE`)."""
    launch = Launch(name=name, image=image, user=user, workdir=Path("/"), writable=(), readable=readable, env=env,
                    command=(docker.settings.python,), gpus=gpus)
    argv, cli_env = run_argv(docker, launch)
    return [argv[0], "run", "--rm", "--interactive=false", *argv[2:]], cli_env
