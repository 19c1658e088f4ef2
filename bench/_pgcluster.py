"""A private PostgreSQL cluster for benchmarks: DATABASE_URL when set, else initdb + pg_ctl in a
temp dir. PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres`
system user (runuser), and is reached over a private Unix-socket-free TCP port."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
# Data directory of each private cluster by the URL it was handed out as (for CPU accounting).
_DATA_DIRS: dict[str, Path] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


@contextmanager
def postgres_server(*, preload: str = "") -> Iterator[str]:
    """Yields a URL to a database on a running server (the server's `postgres` database);
    `preload`: shared_preload_libraries of a private cluster (pg_stat_statements, to count statements)."""
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        yield os.environ["DATABASE_URL"]
        return
    workdir = Path(tempfile.mkdtemp(prefix="ty-pg-"))
    data = workdir / "data"
    port = _free_port()
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    subprocess.run(_as_owner([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                              "--no-sync"]), check=True, capture_output=True)
    opts = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={workdir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=256MB"
            + (f" -c shared_preload_libraries={preload}" if preload else ""))
    subprocess.run(_as_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(workdir / "pg.log"), "-w", "start"]),
                   check=True, capture_output=True)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    _DATA_DIRS[url] = data
    try:
        yield url
    finally:
        _DATA_DIRS.pop(url, None)
        subprocess.run(_as_owner([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


def postmaster_pid(server_url: str) -> int | None:
    """The server's main process (a private cluster started here, or a server on this machine
    whose data directory we can read), else None: its CPU is then counted as other processes'."""
    data = _DATA_DIRS.get(server_url)
    if data is None:
        with contextlib.suppress(Exception):
            import psycopg

            with psycopg.connect(server_url, connect_timeout=5) as conn:
                row = conn.execute("SHOW data_directory").fetchone()
            data = Path(row[0]) if row else None
    try:
        return int((data / "postmaster.pid").read_text().split()[0]) if data else None
    except (OSError, ValueError, IndexError):
        return None


def create_database(server_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


if __name__ == "__main__":
    # Handy for running the test suite against PostgreSQL by hand: prints the URL, then waits.
    with postgres_server() as url:
        print(url, flush=True)
        while True:
            time.sleep(3600)
