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
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from agents import protocol

log = logging.getLogger("agents.client")
T = TypeVar("T")


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
        """GET a file of the server's API to dest (via a temp file and rename, so dest is whole or absent)."""
        self._get_file(self.server + path, self._headers(None), dest, retry_for=retry_for, what=path)

    def store_url(self, url: str) -> str:
        """A URL of an upload plan or download link: absolute (the object store) or relative to the server."""
        return urllib.parse.urljoin(self.server + "/", url)

    def fetch(self, url: str, dest: Path, *, retry_for: float | None = 120.0) -> None:
        """GET an object from the store by a presigned URL: no credential of ours goes with it."""
        self._get_file(self.store_url(url), {}, dest, retry_for=retry_for, what=_redacted(url))

    def put_part(self, url: str, fh: IO[bytes], offset: int, size: int, *, retry_for: float | None = 120.0,
                 timeout: float = 600.0) -> str:
        """PUT `size` bytes of fh from `offset` to a presigned URL; the store's ETag for the part.
        No credential goes with it; 5xx answers and broken connections are tried again."""
        full, what = self.store_url(url), _redacted(url)

        def attempt() -> str:
            fh.seek(offset)
            req = urllib.request.Request(full, data=_Slice(fh, size), method="PUT",
                                         headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"})
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                resp.read()
                return str(resp.headers.get("ETag", ""))

        return self._with_retry("PUT", what, attempt, retry_for=retry_for)

    def _get_file(self, url: str, headers: dict[str, str], dest: Path, *, retry_for: float | None, what: str) -> None:
        tmp = dest.with_name(f".{dest.name}.download")

        def attempt() -> None:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=self.timeout) as resp, open(tmp, "wb") as fh:
                while chunk := resp.read(1 << 20):
                    fh.write(chunk)
            tmp.replace(dest)

        self._with_retry("GET", what, attempt, retry_for=retry_for)

    def _with_retry(self, method: str, what: str, attempt: Callable[[], T], *, retry_for: float | None) -> T:
        """4xx raise ApiError at once; 5xx and connection errors are tried again until retry_for."""
        deadline = None if retry_for is None else time.monotonic() + retry_for
        tries = 0
        while True:
            tries += 1
            try:
                return attempt()
            except urllib.error.HTTPError as err:
                if err.code < 500:
                    raise ApiError(err.code, err.read().decode(errors="replace")[:500], what) from None
                problem = f"HTTP {err.code}"
            except (urllib.error.URLError, OSError, TimeoutError) as err:
                problem = str(getattr(err, "reason", err))
            if self.stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise Unreachable(f"{method} {what}: {problem} (after {tries} tries)")
            self.stop.wait(random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** min(tries, 10))))


class _Slice:
    """`size` bytes of a file from where it stands, in 1 MiB pieces (http.client sends each as
    it comes; given a file it would read 8 KiB at a time)."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.size = fh, size

    def __iter__(self) -> Iterator[bytes]:
        left = self.size
        while left > 0 and (chunk := self.fh.read(min(left, 1 << 20))):
            left -= len(chunk)
            yield chunk


def _redacted(url: str) -> str:
    """A URL for logs and errors: without its query, which holds the signature."""
    return url.split("?", 1)[0]
