"""The only module of the agent that speaks HTTP: JSON requests with retry, backoff and jitter.

4xx answers are the server's verdict and raise ApiError at once (never retried); 5xx answers
and connection errors are retried with exponential backoff and full jitter until `retry_for`
seconds have passed (then Unreachable), or until the stop event is set. A JSON body over the
server's limit is refused here as a 413: sent, it only broke the connection (a broken pipe).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from agents import protocol

log = logging.getLogger("agents.client")


class ApiError(Exception):
    def __init__(self, status: int, body: Any, path: str) -> None:
        self.status = status
        self.body = body
        self.path = path
        super().__init__(f"{path}: HTTP {status}: {self.message}")

    @property
    def message(self) -> str:
        """The server's own words; for an answer that is not the Trainyard API's (a proxy's or a
        web server's HTML page), only what it is, not a screenful of markup."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("message", ""))
        text = str(self.body).strip()
        if text.startswith("<"):
            return "an HTML page, not an answer of the Trainyard API"
        return text[:200]

    @property
    def fields(self) -> dict[str, Any]:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            fields = self.body["error"].get("fields")
            return fields if isinstance(fields, dict) else {}
        return {}

    @property
    def code(self) -> str:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code", ""))
        return ""


class Unreachable(Exception):
    """The server did not answer (connection error, timeout or 5xx) within the retry window."""


class Client:
    def __init__(self, server: str, *, timeout: float = 30.0, stop: threading.Event | None = None,
                 backoff_base: float = 0.25, backoff_max: float = 5.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.stop = stop or threading.Event()
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.credential = ""
        # When the server last answered anything (monotonic; 0.0: never): tells a request that
        # keeps failing on its own from a server that is away.
        self.answered_at = 0.0

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"Accept": "application/json", **(extra or {})}
        if self.credential:
            headers["Authorization"] = f"Node {self.credential}"
        return headers

    def request(self, method: str, path: str, body: Any = None, *, retry_for: float | None = 30.0, timeout: float | None = None,
                data: bytes | IO[bytes] | None = None, headers: dict[str, str] | None = None) -> Any:
        """JSON in, JSON out. retry_for=None retries until the stop event is set."""
        extra = dict(headers or {})
        payload = data
        if body is not None:
            payload = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
            extra["Content-Type"] = "application/json"
            if len(payload) > protocol.MAX_BODY_BYTES:
                words = f"a {len(payload):,}-byte body is over the server's limit of {protocol.MAX_BODY_BYTES:,} bytes"
                raise ApiError(413, {"error": {"status": 413, "code": "too_large", "message": words, "fields": {}}}, path)
        deadline = None if retry_for is None else time.monotonic() + retry_for
        tries = 0
        while True:
            tries += 1
            try:
                if hasattr(payload, "seek"):
                    payload.seek(0)  # type: ignore[union-attr]
                req = urllib.request.Request(self.server + path, data=payload, method=method, headers=self._headers(extra))
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                    raw = resp.read()
                    self.answered_at = time.monotonic()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as err:
                raw = err.read()
                if err.code < 500:
                    self.answered_at = time.monotonic()
                try:
                    parsed: Any = json.loads(raw)
                except ValueError:
                    parsed = raw.decode(errors="replace")[:500]
                if err.code < 500:
                    raise ApiError(err.code, parsed, path) from None
                problem = f"HTTP {err.code}"
            except (urllib.error.URLError, OSError, TimeoutError) as err:
                problem = str(getattr(err, "reason", err))
            if self.stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise Unreachable(f"{method} {path}: {problem} (after {tries} tries)")
            delay = random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** min(tries, 10)))
            if deadline is not None:
                delay = max(0.0, min(delay, deadline - time.monotonic()))
            if tries in (1, 5) or tries % 20 == 0:
                log.warning("%s %s%s failed (%s); retrying in %.1f s (try %d)", method, self.server, path, problem, delay, tries)
            self.stop.wait(delay)

    def download(self, path: str, dest: Path, *, retry_for: float | None = 60.0) -> None:
        """GET a file to dest (via a temp file and rename, so dest is whole or absent)."""
        tmp = dest.with_name(f".{dest.name}.download")
        deadline = None if retry_for is None else time.monotonic() + retry_for
        tries = 0
        while True:
            tries += 1
            try:
                req = urllib.request.Request(self.server + path, headers=self._headers(None))
                with urllib.request.urlopen(req, timeout=self.timeout) as resp, open(tmp, "wb") as fh:
                    while chunk := resp.read(1 << 20):
                        fh.write(chunk)
                tmp.replace(dest)
                return
            except urllib.error.HTTPError as err:
                if err.code < 500:
                    raise ApiError(err.code, err.read().decode(errors="replace")[:500], path) from None
                problem = f"HTTP {err.code}"
            except (urllib.error.URLError, OSError, TimeoutError) as err:
                problem = str(getattr(err, "reason", err))
            if self.stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise Unreachable(f"GET {path}: {problem} (after {tries} tries)")
            self.stop.wait(random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** min(tries, 10))))
