"""agents.isolation on this machine's real accounts and cgroups: a job user is made and removed,
its directories are its own and nobody else's, a cgroup enforces its memory limit (the kernel
kills the job, the agent counts it) and goes away, and without root one team holds the node."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import isolation
from agents.config import parse_args, parse_size
from agents.runner import Runner
from apps.runs.services import failures
from tests.agents.test_runner import FakeShipper, run_until_exit, spec

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users and cgroups: needs root")
PREFIX = f"ty-{isolation.agent_tag(Path('/nonexistent/test-isolation'))}-"


@pytest.fixture
def user() -> Iterator[isolation.JobUser]:
    made = isolation.user_create(f"{PREFIX}a{os.getpid()}")
    try:
        yield made
    finally:
        isolation.user_remove(made.name)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder any user can pass through (pytest's own are 0700 under /tmp/pytest-of-root)."""
    path = Path(tempfile.mkdtemp(prefix="ty-isolation-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_user(user: isolation.JobUser, code: str, cgroup: isolation.Cgroup | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                          preexec_fn=isolation.child_setup(cgroup, user), umask=0o077)


@root_only
def test_a_job_user_is_unprivileged_and_removed_with_its_processes(user: isolation.JobUser) -> None:
    entry = pwd.getpwnam(user.name)
    assert entry.pw_uid == user.uid and user.uid != 0 and entry.pw_shell == "/usr/sbin/nologin"
    assert isolation.users_leftover(PREFIX) == [user.name]
    out = as_user(user, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
    assert out.stdout.split() == [str(user.uid), str(user.gid), "[]"], out.stderr
    # A process of the job that left its group still goes with the user.
    stray = subprocess.Popen(["/usr/bin/sleep", "60"], preexec_fn=isolation.child_setup(None, user), start_new_session=True)
    isolation.user_remove(user.name)
    assert stray.wait(10) == -signal.SIGKILL
    with pytest.raises(KeyError):
        pwd.getpwnam(user.name)
    assert isolation.users_leftover(PREFIX) == []


@root_only
def test_directories_are_the_jobs_alone_and_reclaimed_without_its_links(user: isolation.JobUser, open_tmp: Path) -> None:
    base = open_tmp / "runs"
    (base / "job" / "sub").mkdir(parents=True)
    (base / "job" / "sub" / "f").write_text("x")
    os.chmod(base, 0o711)
    isolation.own(base / "job", user)
    info = (base / "job").stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (user.uid, 0o700)
    assert (base / "job" / "sub" / "f").stat().st_uid == user.uid
    isolation.file_for(base / "result.json", user)
    out = as_user(user, f"open({str(base / 'job' / 'sub' / 'f')!r}).read(); open({str(base / 'result.json')!r}, 'w').write('ok'); "
                        f"import os; os.symlink('/etc/shadow', {str(base / 'job' / 'link')!r})")
    assert out.returncode == 0, out.stderr
    assert (base / "result.json").read_text() == "ok"
    # It cannot write the agent's folder itself: no swapping the result for a link.
    out = as_user(user, f"import os; os.unlink({str(base / 'result.json')!r})")
    assert "PermissionError" in out.stderr
    isolation.reclaim(base / "job")
    assert not (base / "job" / "link").exists() and not (base / "job" / "link").is_symlink()
    assert {p.stat().st_uid for p in (base / "job").rglob("*")} | {(base / "job").stat().st_uid} == {0}


@root_only
def test_another_users_environment_and_files_are_denied(user: isolation.JobUser, open_tmp: Path) -> None:
    secret = open_tmp / "credential"
    secret.write_text("tyn_secret")
    os.chmod(secret, 0o600)
    other = subprocess.Popen(["/usr/bin/sleep", "30"], env={"TY_SECRET": "v"})
    try:
        out = as_user(user, f"""
for path in ({str(secret)!r}, "/proc/{other.pid}/environ", "/proc/1/environ"):
    try:
        open(path, "rb").read()
        print("READ", path)
    except OSError as err:
        print("DENIED", type(err).__name__, err.errno)
""")
    finally:
        other.kill()
        other.wait()
    assert out.stdout.splitlines() == ["DENIED PermissionError 13"] * 3, out.stdout + out.stderr


@pytest.fixture
def cgroups() -> isolation.Cgroups:
    found = isolation.Cgroups.detect(isolation.agent_tag(Path("/nonexistent/test-isolation")))
    if found is None:
        pytest.skip("no cgroup memory controller on this machine")
    return found


@root_only
def test_a_cgroup_enforces_memory_and_cpu_and_is_removed(cgroups: isolation.Cgroups, user: isolation.JobUser) -> None:
    limit = parse_size("64M") or 0
    cgroup = cgroups.create(os.getpid(), memory_bytes=limit, cpus=0.5)
    try:
        if cgroup.version == 1:
            assert int((cgroup.dirs[0] / "memory.limit_in_bytes").read_text()) == limit
            if len(cgroup.dirs) > 1:
                period = int((cgroup.dirs[1] / "cpu.cfs_period_us").read_text())
                assert int((cgroup.dirs[1] / "cpu.cfs_quota_us").read_text()) == period // 2
        else:
            assert int((cgroup.dirs[0] / "memory.max").read_text()) == limit
        assert cgroup.oom_kills() == 0
        # The job (and what it starts) is inside from its first instruction.
        out = as_user(user, "import os, subprocess; print(open('/proc/self/cgroup').read()); "
                            "subprocess.run(['cat', '/proc/self/cgroup'])", cgroup)
        assert out.stdout.count(cgroup.dirs[0].name) == 2 * len(cgroup.dirs), out.stdout + out.stderr
        hog = as_user(user, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n", cgroup)
        assert hog.returncode == -signal.SIGKILL
        assert cgroup.oom_kills() >= 1
        sleeper = subprocess.Popen(["/usr/bin/sleep", "60"], preexec_fn=isolation.child_setup(cgroup, user))
        assert cgroup.pids() == [sleeper.pid]
    finally:
        cgroup.remove()
    assert sleeper.wait(10) == -signal.SIGKILL
    assert not any(d.exists() for d in cgroup.dirs)
    assert cgroups.leftovers() == []


@root_only
def test_leftover_cgroups_are_found_for_removal(cgroups: isolation.Cgroups) -> None:
    cgroup = cgroups.create(os.getpid() + 1, memory_bytes=0, cpus=0)
    try:
        assert [c.dirs for c in cgroups.leftovers()] == [cgroup.dirs]
    finally:
        cgroup.remove()
    assert cgroups.leftovers() == []


def test_without_isolation_the_first_team_holds_the_node(tmp_path: Path) -> None:
    record = tmp_path / "tenant"
    assert isolation.tenant_admit(record, "vision") == ""
    assert isolation.tenant_admit(record, "vision") == ""
    refused = isolation.tenant_admit(record, "nlp")
    assert "runs jobs of team 'vision' only" in refused and "--single-tenant" in refused
    assert "did not say which team" in isolation.tenant_admit(record, None)


def test_isolation_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ISOLATION", "SINGLE_TENANT", "JOB_MEMORY_LIMIT"):
        monkeypatch.delenv(f"TRAINYARD_AGENT_{name}", raising=False)
    config = parse_args(["--workdir", str(tmp_path)])
    assert config.isolation == ("users" if os.geteuid() == 0 else "none")
    assert (config.single_tenant, config.job_memory_per_device, config.job_python) == (False, None, sys.executable)
    config = parse_args(["--workdir", str(tmp_path), "--isolation", "none", "--single-tenant", "--job-memory-limit", "1.5G"])
    assert (config.isolation, config.single_tenant, config.job_memory_per_device) == ("none", True, 3 * 2**29)
    assert [parse_size(t) for t in ("0", "200M", "512MiB", "2g", "auto", "4096")] == [0, 200 << 20, 512 << 20, 2 << 30, None, 4096]
    with pytest.raises(SystemExit):
        parse_args(["--workdir", str(tmp_path), "--job-memory-limit", "lots"])


def test_the_memory_limit_is_the_users_failure() -> None:
    tail = "allocating\ntrainyard agent: rank 0 " + isolation.memory_limit_words(200 << 20)
    failure = failures.classify_exit(rank=0, exit_code=None, signal=signal.SIGKILL, log_tail=tail)
    assert (failure.cls, failure.code, failure.words) == (failures.USER, "memory_limit", "rank 0 exceeded its memory limit of 0.20 GiB")
    assert failures.failure_of("memory_limit", failure.words).requeue is False
    assert "exceeded its memory limit of 2.0 GiB" in isolation.memory_limit_words(2 << 30)
    # A job that only prints the words is not taken at them: a plain SIGKILL stays the node's.
    assert failures.classify_exit(rank=0, exit_code=1, signal=None, log_tail=tail).code == "exit_code"


def _runner(workdir: Path, *flags: str) -> tuple[Runner, FakeShipper]:
    config = parse_args(["--workdir", str(workdir), *flags])
    shipper = FakeShipper()
    return Runner(config, client=None, shipper=shipper), shipper  # type: ignore[arg-type]


def test_without_isolation_another_teams_run_fails_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_AGENT_NO_GPU", "1")
    monkeypatch.delenv("TRAINYARD_AGENT_SINGLE_TENANT")
    script = tmp_path / "ok.py"
    script.write_text("print('ok')\n")
    runner, shipper = _runner(tmp_path / "agent", "--isolation", "none", "--slots", "2")
    runner.submit({**spec(1, script), "team": "vision"})  # type: ignore[typeddict-item]
    assert run_until_exit(runner, None, shipper, 1, 30)["exit_code"] == 0
    runner.submit({**spec(2, script), "team": "nlp"})  # type: ignore[typeddict-item]
    deadline = time.monotonic() + 30
    while not any(e["attempt_id"] == 2 for e in shipper.events) and time.monotonic() < deadline:
        runner.launch_ready()
        time.sleep(0.05)
    refused = shipper.events[-1]
    assert (refused["attempt_id"], refused["event"]) == (2, "failed_to_start"), refused
    assert "runs jobs of team 'vision' only" in refused["message"]


@root_only
def test_a_jobs_user_directories_and_cgroup_last_as_long_as_it(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_AGENT_NO_GPU", "1")
    script = open_tmp / "job.py"
    script.write_text("import os, time\nprint(os.getuid(), os.getcwd(), oct(os.umask(0)), flush=True)\ntime.sleep(1)\n")
    os.chmod(script, 0o644)
    runner, shipper = _runner(open_tmp / "agent", "--isolation", "users", "--job-python", "/usr/bin/python3",
                              "--job-memory-limit", "300M")
    assert stat.S_IMODE((open_tmp / "agent").stat().st_mode) == 0o711
    runner.submit(spec(7, script))
    deadline = time.monotonic() + 30
    while 7 not in runner.jobs and time.monotonic() < deadline:
        runner.launch_ready()
        time.sleep(0.05)
    job = runner.jobs[7]
    assert job.user is not None and job.user.uid != 0
    root = open_tmp / "agent" / "runs" / "7" / "a1-r0"
    for path, owner, mode in ((root / "job", job.user.uid, 0o700), (root.parent / "checkpoints", job.user.uid, 0o700),
                              (root / "agent", 0, 0o750), (open_tmp / "agent" / "runs", 0, 0o711)):
        info = path.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (owner, mode), path
    if runner.cgroups is not None:
        assert job.cgroup is not None and job.cgroup.memory_bytes == 300 << 20
    exited = run_until_exit(runner, None, shipper, 7, 30)
    assert exited["exit_code"] == 0, exited
    out = (root / "agent" / "rank0.stdout.log").read_text().split()
    assert out == [str(job.user.uid), str(root / "job"), "0o77"]
    assert isolation.users_leftover(runner.user_prefix) == []
    assert (root / "job").stat().st_uid == 0 and (root.parent / "checkpoints").stat().st_uid == 0
    assert job.cgroup is None or not job.cgroup.dirs[0].exists()
