"""Environment lineage of an attempt, captured by the agent whatever the job's code does.

A probe runs in the job's own interpreter with the job's environment (so a custom entrypoint
that never imports the SDK is covered) and reports Python, the installed distributions and,
when torch imports, its CUDA and cuDNN versions. The agent adds what it knows itself: host,
rank, the assigned devices, driver versions, seed and params. Nothing here raises: a part that
could not be read becomes a field saying why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents import protocol
from agents.devices import Nvml, cpu_inventory

if TYPE_CHECKING:
    from agents.shipper import Shipper

log = logging.getLogger("agents.lineage")
PROBE_TIMEOUT_S = 60.0
MARK = "TRAINYARD-LINEAGE "
# Bounds the server enforces too (apps.tracking.services): past them a list is cut, and says so.
MAX_PACKAGES = 5000
MAX_PACKAGE_CHARS = 200
# Where the probe runs when not as a plain process: the job's environment in, (the argv up to and
# including the interpreter, the environment of that process) out (a container, agents.container).
Wrap = Callable[[Mapping[str, str]], tuple[list[str], dict[str, str]]]

# Runs as `python -c PROBE`. The first line drops the current directory from sys.path, so a job's
# own json.py or platform.py cannot shadow what the probe imports. One line per part, flushed,
# so a torch import that hangs past the timeout still leaves the rest.
PROBE = """\
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import json, platform
def out(part, data):
    print("TRAINYARD-LINEAGE " + json.dumps({"part": part, "data": data}, default=str), flush=True)
py = {"version": platform.python_version(), "implementation": platform.python_implementation(), "executable": sys.executable}
out("python", {"python": py, "platform": platform.platform()})
try:
    from importlib import metadata
    names = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            names.add(f"{name}=={dist.version}")
    out("packages", sorted(names))
except Exception as err:
    out("packages_error", f"{type(err).__name__}: {err}")
try:
    import torch
except BaseException as err:
    out("torch_error", f"{type(err).__name__}: {err}")
else:
    info = {"version": str(torch.__version__), "cuda": torch.version.cuda, "cudnn": None, "cuda_available": False, "devices": []}
    try:
        info["cudnn"] = torch.backends.cudnn.version()
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as err:
        info["error"] = f"{type(err).__name__}: {err}"
    out("torch", info)
"""


def interpreter(entrypoint: str) -> str:
    """The job's Python: the agent's own for `python`/`python3` (as the runner launches it), a
    named python itself, a script's `#!` interpreter (torchrun, accelerate), else the agent's."""
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return sys.executable
    if not argv or argv[0] in ("python", "python3"):
        return sys.executable
    if Path(argv[0]).name.startswith("python"):
        return argv[0]
    try:
        with open(argv[0], "rb") as fh:
            first = fh.readline(256).decode(errors="replace")
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        words = first[2:].split()
        if words and Path(words[0]).name.startswith("python"):
            return words[0]
        if len(words) > 1 and Path(words[0]).name == "env" and words[1].startswith("python"):
            return words[1]
    return sys.executable


def probe(*, python: str, env: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S, wrap: Wrap | None = None) -> dict[str, Any]:
    """Run PROBE in `python` with `env` (inside what `wrap` makes, if given): its parts by name,
    and "probe_error" if it did not finish."""
    cwd = env.get("TRAINYARD_RUN_DIR") or None
    argv, run_env = [python, "-c", PROBE], dict(env)
    if wrap is not None:
        prefix, run_env = wrap(env)
        argv, cwd = [*prefix, "-c", PROBE], None
    parts: dict[str, Any] = {}
    stdout, error = "", ""
    try:
        done = subprocess.run(argv, env=run_env, cwd=cwd if cwd and os.path.isdir(cwd) else None,
                              capture_output=True, text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
        stdout = done.stdout
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            error = f"the probe exited with {done.returncode}: {tail[0][:500]}"
    except subprocess.TimeoutExpired as err:
        raw = err.stdout or b""
        stdout = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        error = f"the probe took longer than {timeout:.0f} s and was stopped"
    except (OSError, ValueError) as err:
        error = f"the job's interpreter {python!r} could not run: {err}"
    for line in stdout.splitlines():
        if line.startswith(MARK):
            try:
                item = json.loads(line[len(MARK):])
                parts[str(item["part"])] = item["data"]
            except (ValueError, KeyError, TypeError):
                continue
    if error:
        parts["probe_error"] = error
    return parts


def packages_sha256(packages: list[str]) -> str:
    return hashlib.sha256("\n".join(packages).encode()).hexdigest()


def collect(*, python: str, env: Mapping[str, str], spec: protocol.AssignmentSpec, devices: list[protocol.DeviceInfo],
            gpu_driver: str = "", cuda_driver: str = "", container: Container | None = None) -> dict[str, Any]:
    """{"environment": {...}, "packages": [...], "packages_sha256": ...} for this attempt and node.

    `devices` may be the node's whole inventory: only those assigned to the attempt are kept.
    """
    assigned = set(spec.get("devices") or [])
    kind = spec.get("device_kind") or ""
    mine = [d for d in devices if d["index"] in assigned and (not kind or d["kind"] == kind)]
    # The probe sees the attempt's GPUs only, as its processes do (by UUID where known).
    visible = [d["uuid"] or str(d["index"]) for d in mine] if mine else [str(i) for i in sorted(assigned)]
    parts = probe(python=python, env={**env, "CUDA_VISIBLE_DEVICES": ",".join(visible) if kind == "gpu" else ""},
                  wrap=container.wrap if container is not None else None)
    params = dict(spec.get("params") or {})
    environment: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "node_rank": spec["node_rank"],
        "devices": [{"kind": d["kind"], "index": d["index"], "model": d["model"], "uuid": d["uuid"]} for d in mine],
        "gpu_driver": gpu_driver,
        "cuda_driver": cuda_driver,
        "python": (parts.get("python") or {}).get("python"),
        "platform": (parts.get("python") or {}).get("platform"),
        "torch": parts.get("torch"),
        "seed": params.get("seed"),
        "params": params,
    }
    if container is not None:
        environment["container"] = dict(container.record)
    for name in ("probe_error", "packages_error", "torch_error"):
        if name in parts:
            environment[name] = str(parts[name])[:2000]
    packages = sorted({str(p) for p in parts.get("packages") or [] if isinstance(p, str)})
    if len(packages) > MAX_PACKAGES or any(len(p) > MAX_PACKAGE_CHARS for p in packages):
        environment["packages_note"] = (f"{len(packages)} distributions; kept the first {MAX_PACKAGES} of at most "
                                        f"{MAX_PACKAGE_CHARS} characters each")
        packages = [p for p in packages if len(p) <= MAX_PACKAGE_CHARS][:MAX_PACKAGES]
    return {"environment": environment, "packages": packages, "packages_sha256": packages_sha256(packages)}


def node_hardware(slots: int) -> tuple[list[protocol.DeviceInfo], str, str]:
    """This node's devices and its GPU and CUDA driver versions, where NVML tells them."""
    nvml = Nvml()
    if not nvml.available:
        return cpu_inventory(slots), "", ""
    versions = []
    for name in ("driver_version", "cuda_driver_version"):
        read = getattr(nvml, name, None)  # agents.devices gains these; until then, unknown
        versions.append(str(read()) if callable(read) else "")
    return nvml.inventory(), versions[0], versions[1]


def report_on_node(shipper: Shipper, *, spec: protocol.AssignmentSpec, env: Mapping[str, str], slots: int,
                   container: Container | None = None) -> threading.Thread:
    """report() with what the agent can find out alone: the entrypoint's interpreter and this node's hardware."""
    try:
        devices, gpu_driver, cuda_driver = node_hardware(slots)
    except OSError as err:
        log.error("attempt %d: could not read this node's devices for its lineage: %s", spec["attempt_id"], err)
        devices, gpu_driver, cuda_driver = [], "", ""
    return report(shipper, python=interpreter(spec["entrypoint"]), env=env, spec=spec, devices=devices, gpu_driver=gpu_driver,
                  cuda_driver=cuda_driver, container=container)


@dataclass(frozen=True)
class Container:
    """An attempt that runs in a container: what lineage records of it (image, digest, runtime)
    and how the probe runs in the same image."""

    record: Mapping[str, Any]
    wrap: Wrap


def report(shipper: Shipper, *, python: str, env: Mapping[str, str], spec: protocol.AssignmentSpec,
           devices: list[protocol.DeviceInfo], gpu_driver: str = "", cuda_driver: str = "",
           container: Container | None = None) -> threading.Thread:
    """Collect the attempt's lineage in a thread of its own and spool it for POST lineage/ (sent,
    like every report, once the server answers); returns at once, with the thread.

    The job does not wait for the probe (about 2 s with torch, more on a busy node). The probe
    only reads versions and names: torch's CUDA initialisation makes no context on the GPUs.
    """
    thread = threading.Thread(target=_report, name=f"lineage-{spec['attempt_id']}", daemon=True,
                              args=(shipper, python, dict(env), spec, list(devices), gpu_driver, cuda_driver, container))
    thread.start()
    return thread


def _report(shipper: Shipper, python: str, env: dict[str, str], spec: protocol.AssignmentSpec, devices: list[protocol.DeviceInfo],
            gpu_driver: str, cuda_driver: str, container: Container | None = None) -> None:
    try:
        data = collect(python=python, env=env, spec=spec, devices=devices, gpu_driver=gpu_driver, cuda_driver=cuda_driver,
                       container=container)
        body: protocol.LineageReport = {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": spec["node_rank"],
                                        "environment": data["environment"], "packages": data["packages"],
                                        "packages_sha256": data["packages_sha256"]}
        shipper.lineage(body)
    except Exception:
        # Broad on purpose: a bug here must cost the record, never the agent's thread or the job.
        log.exception("attempt %d: no lineage recorded", spec["attempt_id"])
