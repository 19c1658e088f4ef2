"""A real S3 endpoint for the storage tests: moto's server (moto_server, from requirements-dev.txt)
on a free port, spoken to over HTTP exactly as an S3 or MinIO server would be."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.services import free_port, wait_for_port

KEY = "testing"  # moto takes any credentials; these are not secrets


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    log: Path

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                            aws_secret_access_key=KEY)

    def bucket(self) -> str:
        name = f"ty-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def env(self, bucket: str, *, part_bytes: int = 5 * 1024 * 1024) -> dict[str, str]:
        """The settings a web host, worker or manage.py gets to use this server's bucket."""
        return {"TRAINYARD_STORAGE_BUCKET": bucket, "TRAINYARD_STORAGE_ENDPOINT": self.endpoint,
                "TRAINYARD_STORAGE_REGION": "us-east-1", "TRAINYARD_STORAGE_ACCESS_KEY": KEY,
                "TRAINYARD_STORAGE_SECRET_KEY": KEY, "TRAINYARD_STORAGE_PART_BYTES": str(part_bytes)}


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free port, for as long as the block runs (the fixture's, and
    bench/storage_upload.py's)."""
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="ty-moto-")) / "moto.log"
    moto = Path(sys.executable).parent / "moto_server"
    with open(log, "ab") as out:
        # At the lowest CPU priority: it stands in for a store on other machines, and on a small
        # test machine its Python S3 emulation would otherwise take the web's CPU.
        proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: os.nice(19))
    try:
        wait_for_port(port, 60)
        yield S3Server(f"http://127.0.0.1:{port}", log)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@pytest.fixture
def s3_settings(s3_server: S3Server, settings: Any) -> S3Server:
    """This test's Django settings point at a fresh bucket of the moto server."""
    bucket = s3_server.bucket()
    settings.TRAINYARD_STORAGE_BACKEND = "s3"
    for name, value in s3_server.env(bucket).items():
        setattr(settings, name, int(value) if name.endswith("_BYTES") else value)
    return s3_server


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, settings: Any, tmp_path: Path) -> str:
    """Each test runs against the local folder and against S3 (moto's server)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.TRAINYARD_STORAGE_BACKEND = "local"
    if request.param == "s3":
        request.getfixturevalue("s3_settings")
    return str(request.param)
