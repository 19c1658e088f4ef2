"""A Redis for a bench's live stack: REDIS_URL's, or a private redis-server (the embedded one
make run uses) for as long as the block runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def bench_redis() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from tests.fixtures.services import free_port, redis_server_binary, wait_for_port

    port = free_port()
    proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--save", ""], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
