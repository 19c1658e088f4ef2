"""A run's log searched (the lines that hold a text) and read whole as text, for the run page's
search box and download link and for scripts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from apps.core.errors import FieldError
from apps.runs.models import LogChunk, Run

LOG_QUERY_MAX_CHARS = 200
# Chunks read per search page, and matching lines after which a page stops (at a chunk's end).
LOG_SEARCH_CHUNKS = 2000
LOG_SEARCH_LINES = 500
# Chunks read per database round trip while a download streams.
LOG_DOWNLOAD_BATCH = 500


def log_query_clean(raw: str | None) -> str:
    """The search text, or a FieldError naming `q` and the limit."""
    q = raw or ""
    if len(q) > LOG_QUERY_MAX_CHARS:
        raise FieldError("q", f"{len(q)} characters; the limit is {LOG_QUERY_MAX_CHARS}")
    if "\x00" in q:
        raise FieldError("q", "must not contain NUL characters")
    return q


def log_search(*, run: Run, q: str, after: int = 0, limit: int = LOG_SEARCH_CHUNKS) -> dict[str, Any]:
    """The log lines holding `q` (case-insensitive), in the order they arrived, as chunks of
    only those lines: the same shape as an unfiltered page, so a client follows it the same way.

    The database picks the chunks that hold the text (no chunk is read into Python to be
    thrown away); a line split between two chunks by the agent's batching is not found."""
    chunks = list(LogChunk.objects.filter(run=run, pk__gt=after, text__icontains=q).select_related("attempt").order_by("pk")[:limit])
    needle = q.casefold()
    out: list[dict[str, Any]] = []
    matches = 0
    last = after
    for c in chunks:
        lines = [line for line in c.text.splitlines() if needle in line.casefold()]
        last = c.pk
        if lines:
            matches += len(lines)
            out.append({"id": c.pk, "attempt": c.attempt.number, "rank": c.rank, "stream": c.stream, "text": "\n".join(lines) + "\n",
                        "created_at": c.created_at.isoformat()})
        if matches >= LOG_SEARCH_LINES:
            break
    more = len(chunks) == limit or (bool(chunks) and last != chunks[-1].pk)
    return {"q": q, "matches": matches, "chunks": out, "next": last, "more": more}


def log_text(*, run: Run) -> Iterator[str]:
    """The run's whole log as text, chunk by chunk in the order it arrived, read in batches so a
    long log streams without being held in memory. A line marks where each attempt after the
    first begins."""
    after = 0
    attempt: int | None = None
    while True:
        batch = list(LogChunk.objects.filter(run=run, pk__gt=after).select_related("attempt").order_by("pk")
                     .only("pk", "text", "attempt__number")[:LOG_DOWNLOAD_BATCH])
        for c in batch:
            number = c.attempt.number
            if number != attempt and (attempt is not None or number > 1):
                yield f"\n[trainyard: attempt {number}]\n"
            attempt = number
            yield c.text
        if len(batch) < LOG_DOWNLOAD_BATCH:
            return
        after = batch[-1].pk
