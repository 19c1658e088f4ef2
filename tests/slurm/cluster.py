"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd as root, each with
its own key, sockets, state and ports under a temporary folder (no systemd, nothing system-wide).

The node is configured with more CPUs than the machine may have (SlurmdParameters=config_overrides)
so that two jobs can wait on each other; Slurm does not pin them, the kernel shares the cores.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CPUS = 4
PARTITION = "debug"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client command needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _write_conf(self) -> None:
        for d in ("etc", "munge", "state", "spool", "log", "run"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        self.conf.write_text(f"""\
ClusterName=trainyard-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool'}
SlurmctldPidFile={self.root / 'run' / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'run' / 'slurmd.pid'}
SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}
SlurmdLogFile={self.root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
MessageTimeout=20
InactiveLimit=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName={host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=1000 State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")

    def start(self, timeout: float = 60.0) -> None:
        self._write_conf()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge_dir = self.root / "munge"
        subprocess.run(["/usr/sbin/munged", "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
                        f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
                        f"--seed-file={munge_dir / 'munged.seed'}"], check=True, timeout=30)
        env = {**os.environ, **self.env}
        for argv in (["/usr/sbin/slurmctld", "-D", "-c", "-i", "-f", str(self.conf)],
                     ["/usr/sbin/slurmd", "-D", "-N", socket.gethostname(), "-f", str(self.conf)]):
            log = open(self.root / "log" / f"{Path(argv[0]).name}.out", "ab")
            self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=30)
            if out.stdout.strip() == "idle":
                return
            time.sleep(0.3)
        raise RuntimeError(f"the Slurm node did not become idle in {timeout} s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((self.root / "log").glob("*")))

    def command(self, *argv: str) -> str:
        return subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60,
                              check=True).stdout

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env={**os.environ, **self.env}, capture_output=True, timeout=30)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        pid_file = self.root / "munge" / "munged.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass


def slurm_missing() -> str:
    """Why this machine cannot run the cluster ("" when it can)."""
    if os.geteuid() != 0:
        return "Slurm's daemons run as root here"
    for tool in ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "sbatch"):
        if not (Path(tool).exists() or shutil.which(tool)):
            return f"{tool} is not installed (apt-get install slurm-wlm munge)"
    return ""
