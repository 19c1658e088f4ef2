"""The agent reads files a job names as root: a checkpoint 'file' that is a link (to the node's
credential, say) is never uploaded, and neither is anything but a regular file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents.shipper import Shipper, Spool


class RecordingClient:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        data = kwargs.get("data")
        if data is not None:
            self.bodies.append(data.read())
        return {}


def shipper(tmp_path: Path) -> tuple[Shipper, RecordingClient]:
    client = RecordingClient()
    return Shipper(client, Spool(tmp_path / "spool", 1 << 20), interval=1.0, on_stale=lambda *a: None), client  # type: ignore[arg-type]


def test_a_checkpoint_that_is_a_link_is_not_uploaded(tmp_path: Path) -> None:
    credential = tmp_path / "credential"
    credential.write_text("tyn_node_secret")
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    os.symlink(credential, ckpt / "step-10.pt")
    ship, client = shipper(tmp_path)
    ship._upload(1, ckpt / "step-10.pt", None)
    assert client.bodies == []


def test_a_fifo_is_not_uploaded_and_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "step-10.pt")
    ship, client = shipper(tmp_path)
    ship._upload(1, tmp_path / "step-10.pt", None)
    assert client.bodies == []


def test_a_plain_checkpoint_is_uploaded(tmp_path: Path) -> None:
    (tmp_path / "step-10.pt").write_bytes(b"weights")
    ship, client = shipper(tmp_path)
    ship._upload(1, tmp_path / "step-10.pt", None)
    assert client.bodies == [b"weights"]
