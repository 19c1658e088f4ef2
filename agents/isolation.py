"""What keeps jobs on one node apart: a Unix user per attempt, its private directories, its cgroup.

An agent running as root runs each attempt as its own unprivileged user (``ty-<agent>-a<attempt>``,
made before the job starts, removed after), so a job cannot read another's files, checkpoints or
``/proc/<pid>/environ`` (where its secrets are), nor the agent's credential. A cgroup per attempt
(v2 where its memory controller is enabled, else v1) enforces the job's memory and CPU limits, and
tells the agent at exit whether the kernel killed the job for its memory. Without root there is
no isolation: the agent runs one team's jobs only (``tenant_admit``) unless told the node is
single-tenant. Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import pwd
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("agents.isolation")
PR_SET_PDEATHSIG = 1
# useradd and userdel lock /etc/passwd: another agent on the host (or an admin) may hold it a moment.
ACCOUNTS_WAIT_S = 15.0
KILL_WAIT_S = 5.0
_accounts = threading.Lock()


def agent_tag(workdir: Path) -> str:
    """Short and stable per agent (one workdir, one agent): names its users and cgroups apart from
    another agent's on the same host, so each cleans up only its own leftovers."""
    return hashlib.sha256(str(workdir).encode()).hexdigest()[:6]


def gib(n: int) -> str:
    return f"{n / 2**30:.1f}" if n >= 2**30 else f"{n / 2**30:.2f}"


def memory_limit_words(limit: int) -> str:
    """The line the agent adds to an exit's log tail; apps.runs.services.failures classes it as the user's."""
    return f"exceeded its memory limit of {gib(limit)} GiB (the kernel killed it)"


# --- users ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int


def _accounts_run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + ACCOUNTS_WAIT_S
    with _accounts:
        while True:
            result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            # 1 and 10: could not lock or update the password or group file (someone else holds it).
            if result.returncode not in (1, 10) or time.monotonic() >= deadline:
                return result
            time.sleep(0.2)


def user_create(name: str) -> JobUser:
    """A system user with no home, no login shell and no group but its own."""
    argv = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
            "--user-group", name]
    result = _accounts_run(argv)
    if result.returncode == 9:  # the name is taken: a leftover of a killed agent, with nothing of a live job
        user_remove(name)
        result = _accounts_run(argv)
    if result.returncode != 0:
        raise OSError(f"useradd {name} failed (exit {result.returncode}): {result.stderr.strip()}")
    entry = pwd.getpwnam(name)
    return JobUser(name, entry.pw_uid, entry.pw_gid)


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids


def user_remove(name: str) -> None:
    """Kill whatever still runs as the user (a job's process that left its group), then delete it."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    deadline = time.monotonic() + KILL_WAIT_S
    while (pids := processes_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        time.sleep(0.05)
    result = _accounts_run(["userdel", name])
    if result.returncode not in (0, 6):  # 6: no such user
        log.error("userdel %s failed (exit %d): %s", name, result.returncode, result.stderr.strip())


def users_leftover(prefix: str) -> list[str]:
    pattern = re.compile(re.escape(prefix) + r"a\d+$")
    return sorted(p.pw_name for p in pwd.getpwall() if pattern.match(p.pw_name))


# --- directories ----------------------------------------------------------------------------


def own(path: Path, user: JobUser) -> None:
    """``path`` and everything in it become the user's, the top 0700. Symbolic links are left
    as they are (lchown), never followed."""
    os.lchown(path, user.uid, user.gid)
    os.chmod(path, 0o700)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), user.uid, user.gid)


def reclaim(path: Path) -> None:
    """Back to root before the agent writes in a directory a job owned: symbolic links a job left
    (which would turn the agent's writes or uploads into reads and writes elsewhere) are removed."""
    if not path.is_dir():
        return
    os.lchown(path, 0, 0)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(top, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.lchown(full, 0, 0)


def shared_with(path: Path, user: JobUser) -> None:
    """A directory of the agent's that the job may enter and read (0750, its group), not write."""
    os.chown(path, 0, user.gid)
    os.chmod(path, 0o750)


def file_for(path: Path, user: JobUser) -> None:
    """An empty file, the job's to write (a log, the launcher's result), in a directory it cannot
    write: the agent later reads it and the job cannot swap it for a link."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchown(fd, user.uid, user.gid)
    os.close(fd)


def job_reach_problem(python: str, repo: Path, runs_dir: Path) -> str:
    """Why a job running as an unprivileged user could not start here ("" when it can): its
    interpreter, the agent's code and the runs folder must be reachable by any user."""
    probe = f"import os, agents.launch, trainyard; os.stat({str(runs_dir)!r})"
    env = {"PYTHONPATH": f"{repo}{os.pathsep}{repo / 'sdk'}", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    try:
        result = subprocess.run([python, "-c", probe], env=env, cwd="/", capture_output=True, text=True, timeout=30,
                                user=65534, group=65534, extra_groups=[], stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        return f"{python} cannot be run by an unprivileged user: {err}"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return f"a job running as an unprivileged user cannot use {python}, {repo} or {runs_dir}: {last}"
    return ""


# --- one team per node without isolation ----------------------------------------------------


def tenant_admit(record: Path, team: str | None) -> str:
    """Without per-job users every job can read every other's secrets and the node credential, so
    the node serves one team: the first whose job it runs (kept in ``record``). Returns why a job
    of another team is refused ("" when admitted)."""
    if not team:
        return ("the server did not say which team this run belongs to; an agent without per-job users runs one team's jobs "
                "only: upgrade the portal, run the agent as root, or start it with --single-tenant")
    try:
        pinned = record.read_text().strip()
    except FileNotFoundError:
        pinned = ""
    if not pinned:
        record.write_text(team + "\n")
        return ""
    if pinned == team:
        return ""
    return (f"this node runs jobs of team {pinned!r} only: its agent runs every job as its own Unix user, so it cannot keep "
            f"one team's jobs from reading another's secrets and files (run the agent as root for per-job users, or start it "
            f"with --single-tenant "
            f"where every team may share; remove {record} to hand the node to another team)")


# --- cgroups --------------------------------------------------------------------------------


@dataclass
class Cgroup:
    version: int
    dirs: list[Path]  # v2: one; v1: one per controller (memory first)
    memory_bytes: int

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def _memory_file(self, name: str) -> str:
        try:
            return (self.dirs[0] / name).read_text()
        except OSError:
            return ""

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for the memory limit (v1 memory.oom_control or
        v2 memory.events: oom_kill)."""
        text = self._memory_file("memory.oom_control" if self.version == 1 else "memory.events")
        match = re.search(r"^oom_kill (\d+)$", text, re.M)
        return int(match.group(1)) if match else 0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs_files[0].read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        deadline = time.monotonic() + KILL_WAIT_S
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            deadline = time.monotonic() + KILL_WAIT_S
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY or time.monotonic() >= deadline:
                        log.error("cannot remove cgroup %s: %s", d, err)
                        break
                    time.sleep(0.05)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class Cgroups:
    """Where this agent makes its attempts' cgroups (``ty-<agent>-a<attempt>``): under the agent's own
    cgroup in the v1 memory and cpu hierarchies, or in a ``ty-<agent>`` group under it in v2 (whose
    controllers reach only children of a cgroup without processes of its own)."""

    version: int
    groups: list[Path]  # v2: one; v1: memory, then cpu when mounted
    prefix: str

    @classmethod
    def detect(cls, tag: str) -> Cgroups | None:
        mounts: dict[str, Path] = {}  # controller ("" for v2) -> mount point
        try:
            lines = Path("/proc/self/mounts").read_text().splitlines()
            own = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            fields = line.split()
            if len(fields) < 4:
                continue
            if fields[2] == "cgroup2":
                mounts[""] = Path(fields[1])
            elif fields[2] == "cgroup":
                for opt in fields[3].split(","):
                    if opt in ("memory", "cpu"):
                        mounts[opt] = Path(fields[1])
        paths: dict[str, str] = {}  # controller ("" for v2) -> the agent's own cgroup in it
        for line in own:
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path.lstrip("/")
        if "" in mounts and "" in paths:
            base = mounts[""] / paths[""]
            try:
                available = (base / "cgroup.controllers").read_text().split()
            except OSError:
                available = []
            if "memory" in available:
                return cls._v2(base, tag, available)
        if "memory" in mounts and "memory" in paths:
            groups = [mounts["memory"] / paths["memory"]]
            if "cpu" in mounts and "cpu" in paths:
                groups.append(mounts["cpu"] / paths["cpu"])
            return cls(1, groups, f"ty-{tag}-")
        return None

    @classmethod
    def _v2(cls, base: Path, tag: str, available: list[str]) -> Cgroups:
        wanted = " ".join(f"+{c}" for c in ("memory", "cpu", "pids") if c in available)
        try:
            _write(base / "cgroup.subtree_control", wanted)
        except OSError as err:
            if err.errno != errno.EBUSY:
                raise
            # v2 lets no cgroup with processes of its own hand controllers to children: the agent
            # (and what shares its cgroup) moves to a leaf first.
            leaf = base / f"ty-{tag}-agent"
            leaf.mkdir(exist_ok=True)
            for pid in (base / "cgroup.procs").read_text().split():
                try:
                    _write(leaf / "cgroup.procs", pid)
                except OSError:
                    continue  # gone, or a kernel thread
            _write(base / "cgroup.subtree_control", wanted)
        group = base / f"ty-{tag}"
        group.mkdir(exist_ok=True)
        _write(group / "cgroup.subtree_control", wanted)
        return cls(2, [group], f"ty-{tag}-")

    def create(self, attempt_id: int, *, memory_bytes: int, cpus: float) -> Cgroup:
        dirs = [g / f"{self.prefix}a{attempt_id}" for g in self.groups]
        cgroup = Cgroup(self.version, dirs, memory_bytes)
        for d in dirs:
            d.mkdir(exist_ok=True)
        try:
            self._limit(dirs, memory_bytes, cpus)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    def _limit(self, dirs: list[Path], memory_bytes: int, cpus: float) -> None:
        d = dirs[0]
        if self.version == 2:
            if memory_bytes:
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            if cpus and (d / "cpu.max").exists():
                _write(d / "cpu.max", f"{max(1000, int(cpus * 100000))} 100000")
            return
        if memory_bytes:
            _write(d / "memory.limit_in_bytes", str(memory_bytes))
            if (d / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit either
                _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
        if cpus and len(dirs) > 1:
            period = int((dirs[1] / "cpu.cfs_period_us").read_text())
            _write(dirs[1] / "cpu.cfs_quota_us", str(max(1000, int(cpus * period))))

    def leftovers(self) -> list[Cgroup]:
        pattern = re.compile(re.escape(self.prefix) + r"a\d+")
        names = sorted({p.name for g in self.groups for p in g.iterdir() if p.is_dir() and pattern.fullmatch(p.name)})
        return [Cgroup(self.version, [g / n for g in self.groups if (g / n).is_dir()], 0) for n in names]


# --- the job's first moments ----------------------------------------------------------------


def child_setup(cgroup: Cgroup | None, user: JobUser | None) -> Callable[[], None]:
    """What the job's first process does between fork and exec, while still root: join its
    cgroup (so everything it starts is inside from the first instruction), drop to its user, and
    arrange to die with the agent (after the drop: changing credentials clears PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    procs = [str(p).encode() for p in cgroup.procs_files] if cgroup is not None else []

    def setup() -> None:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        if user is not None:
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return setup
