"""Redaction of project secrets from job output before it is written to disk or shipped.

The agent gets a run's secrets in the claim response, sets them in the job's environment, and
passes the job's stdout/stderr through a Redactor on their way to the log files the shipper
reads: a value never reaches the agent's disk or the server. Each value is replaced by
``[redacted:NAME]``, also in the escaped forms a job is likely to print (repr / JSON escapes,
URL quoting). Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable
from typing import IO, Any

CHUNK = 65536


class Redactor:
    def __init__(self, secrets: dict[str, str]) -> None:
        forms: dict[str, str] = {}
        for name, value in secrets.items():
            if not value:
                continue
            for form in _forms(value):
                # A longer value wins where two overlap (one secret containing another).
                if form not in forms or len(value) > len(forms[form]):
                    forms[form] = name
        self.names = sorted(secrets)
        self.longest = max((len(f) for f in forms), default=0)
        ordered = sorted(forms, key=len, reverse=True)
        self._forms = ordered
        self._pattern = re.compile("|".join(re.escape(f) for f in ordered)) if ordered else None
        self._names = forms

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda m: f"[redacted:{self._names[m.group(0)]}]", text)

    def safe_split(self, text: str) -> int:
        """How much of ``text`` can be redacted and written now: all of it, except a tail that
        could be the start of a value whose rest has not been read yet."""
        if self._pattern is None:
            return len(text)
        last_end = 0
        for match in self._pattern.finditer(text):
            last_end = match.end()
        for start in range(max(last_end, len(text) - self.longest + 1), len(text)):
            tail = text[start:]
            if any(form.startswith(tail) for form in self._forms):
                return start
        return len(text)

    def redact_json(self, data: Any) -> Any:
        """Every string in a JSON-like value (lineage, a checkpoint's metrics), keys included."""
        if self._pattern is None:
            return data
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, dict):
            return {self.redact(str(k)): self.redact_json(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self.redact_json(v) for v in data]
        return data


def _forms(value: str) -> Iterable[str]:
    yield value
    # A multi-line value (a PEM key) may be printed line by line.
    for line in value.splitlines():
        if len(line.strip()) >= 8:
            yield line.strip()
    yield json.dumps(value)[1:-1]
    yield value.encode("unicode_escape").decode("ascii")
    yield urllib.parse.quote(value, safe="")
    yield urllib.parse.quote_plus(value)


def pump(source: IO[bytes], dest_path: str, redactor: Redactor) -> threading.Thread:
    """Copy a child's output pipe to ``dest_path`` (appending), redacted, until the pipe closes.

    A value split across two reads is still caught: only a tail that could begin a value is
    held back, until the next read shows how it ends (or the pipe closes).
    """

    def run() -> None:
        pending = ""
        fd = source.fileno()
        with open(dest_path, "a", encoding="utf-8", errors="replace") as out:
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                pending += chunk.decode("utf-8", errors="replace")
                cut = redactor.safe_split(pending)
                if cut:
                    out.write(redactor.redact(pending[:cut]))
                    out.flush()
                    pending = pending[cut:]
            if pending:
                out.write(redactor.redact(pending))
        source.close()

    thread = threading.Thread(target=run, name=f"redact-{os.path.basename(dest_path)}", daemon=True)
    thread.start()
    return thread
