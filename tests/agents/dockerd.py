"""A private Docker engine for tests, and a small image to run jobs in (no registry is reachable).

The engine keeps everything (data root, socket, pid file) under one temporary folder, without
iptables or a bridge: the tests use ``--network none`` only. The image is a Debian bookworm
``minbase`` root filesystem with Python 3, built once with debootstrap and cached as a tarball
under ``var/test-cache`` (about a minute the first time), then ``docker import``-ed in seconds.
The jobs' Python packages (torch, scikit-learn) come from the test's own virtualenv, mounted
read-only, as an admin would mount a shared toolchain (``--container-mount``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "var" / "test-cache"
IMAGE_TAG = "trainyard-test/python:bookworm-1"
# python3 brings libssl3, libffi, libsqlite3, zlib, bz2 and lzma, which a host Python mounted from
# elsewhere (pyenv) needs as well; torch and scikit-learn need libgomp and libstdc++.
PACKAGES = "python3,libgomp1,libstdc++6,ca-certificates"
MIRROR = "http://deb.debian.org/debian"


@dataclass
class Engine:
    root: Path
    host: str  # DOCKER_HOST
    proc: subprocess.Popen[bytes]

    def docker(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], env={**os.environ, "DOCKER_HOST": self.host}, capture_output=True, text=True,
                              check=check, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        for line in self.docker("ps", "-aq", check=False).stdout.split():
            self.docker("rm", "-f", line, check=False)
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def engine_start() -> Engine:
    root = Path(tempfile.mkdtemp(prefix="ty-dockerd-"))
    os.chmod(root, 0o711)
    sock = root / "docker.sock"
    argv = ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
            "-H", f"unix://{sock}", "--iptables=false", "--ip6tables=false", "--bridge=none"]
    log = open(root / "dockerd.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    engine = Engine(root, f"unix://{sock}", proc)
    deadline = time.monotonic() + 60
    while engine.docker("version", check=False).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            engine.stop()
            raise RuntimeError(f"dockerd did not start: {(root / 'dockerd.log').read_text()[-2000:]}")
        time.sleep(0.2)
    return engine


def rootfs_tarball() -> Path:
    """The cached root filesystem, built with debootstrap the first time."""
    tarball = CACHE / "bookworm-python3.tar"
    if tarball.is_file():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="ty-rootfs-", dir=CACHE))
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(build / "root"), MIRROR],
                       check=True, capture_output=True, timeout=900, stdin=subprocess.DEVNULL)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(build / "root" / cache, ignore_errors=True)
        partial = build / "rootfs.tar"
        subprocess.run(["tar", "-C", str(build / "root"), "-cf", str(partial), "."], check=True, timeout=300)
        os.replace(partial, tarball)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return tarball


def image_import(engine: Engine) -> str:
    """Imports the test image; returns its id ("sha256:..."), the digest an admin would approve."""
    engine.docker("import", "--change", "CMD [\"/bin/sh\"]", str(rootfs_tarball()), IMAGE_TAG, timeout=600)
    return engine.docker("image", "inspect", "--format", "{{.Id}}", IMAGE_TAG).stdout.strip()


def python_mounts() -> list[str]:
    """The test's virtualenv and, where it is not the image's /usr, the Python it was made from."""
    mounts = [sys.prefix]
    base = sys.base_prefix
    if base != sys.prefix and not base.startswith("/usr"):
        mounts.append(base)
    return mounts
