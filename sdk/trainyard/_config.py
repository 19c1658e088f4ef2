"""Where the CLI keeps the server URL and API token: ``$XDG_CONFIG_HOME/trainyard/config.json``
(else ``~/.config/trainyard/config.json``), readable by its owner only (mode 600).

``TRAINYARD_SERVER`` and ``TRAINYARD_TOKEN`` in the environment override the file, so CI jobs
and containers need no file at all.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Config:
    server: str | None
    token: str | None
    username: str | None = None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainyard" / "config.json"


def config_load(*, env: bool = True) -> Config:
    """The saved server and token, overridden by the environment unless `env` is False."""
    data: dict[str, str] = {}
    path = config_path()
    try:
        raw = json.loads(path.read_text())
        if isinstance(raw, dict):
            data = {k: str(v) for k, v in raw.items() if isinstance(v, str)}
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        data = {}  # an unreadable file behaves as "not logged in"; login rewrites it
    return Config(
        server=(os.environ.get("TRAINYARD_SERVER") if env else None) or data.get("server"),
        token=(os.environ.get("TRAINYARD_TOKEN") if env else None) or data.get("token"),
        username=data.get("username"),
    )


def config_save(*, server: str, token: str, username: str) -> Path:
    """Writes the file atomically, created with mode 600 so the token is never world-readable."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".tmp")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"server": server, "token": token, "username": username}, fh, indent=2)
            fh.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
