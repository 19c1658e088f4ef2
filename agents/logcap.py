"""What the agent ships of one log file (one rank's stdout or stderr): all of it up to a head,
then at most a sustained rate, and always the tail; a run of skipped output becomes one note.

A job that floods its output must not flood the server, the spool or the sender: what is
skipped is only counted (bytes, line numbers), never buffered, because the file itself holds
it. Bytes past `offset` are undecided; while output comes faster than the rate allows they wait
there, at most `tail_bytes` of them, so that whatever ends the flood, its last lines are kept.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

READ_BLOCK = 8 << 20
# Beyond this much new output in one tick, the rest waits for the next tick (but not at the end).
SCAN_MAX = 256 << 20
# How far to look for a line end before cutting a line in two.
LINE_SEARCH = 64 << 10


@dataclass(frozen=True)
class LogLimits:
    head_bytes: int = 1 << 20
    tail_bytes: int = 1 << 20
    # After the head: a sustained rate, spent in bursts (a sample of the newest output when a
    # flood outlasts the bucket).
    rate_bytes_s: float = 8 << 10
    burst_bytes: int = 256 << 10


# bytes: what the job wrote; str: the agent's note of what it skipped.
Piece = bytes | str


def size_words(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if n < scale * 1000 or unit == "GB":
            return f"{n / scale:.1f} {unit}"
    raise AssertionError("unreachable")


@dataclass
class LogCap:
    """What has been decided about one log file; kept in the attempt's ship-state.json."""

    offset: int = 0  # the first byte neither shipped nor skipped
    lines: int = 0  # line ends before offset
    shipped: int = 0
    head_done: bool = False
    tokens: float = 0.0
    refilled_at: float = 0.0
    gap_bytes: int = 0  # skipped and not yet said
    gap_first_line: int = 0
    gap_last_line: int = 0
    dropped_bytes: int = 0  # skipped in all

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogCap:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def take(self, path: Path, *, final: bool, now: float, limits: LogLimits, label: str) -> list[Piece]:
        """New output to ship, and a note for each stretch skipped. `final`: the writer has exited,
        so everything left is decided now and a last line without a newline counts."""
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            return []
        with fh:
            size = os.fstat(fh.fileno()).st_size
            end = size if final else min(_complete_end(fh, self.offset, size), self.offset + SCAN_MAX)
            if end <= self.offset:
                return []
            pieces: list[Piece] = []
            if not self.head_done:
                self._head(fh, end, limits, pieces, now)
            if self.offset < end:
                self._capped(fh, end, final=final, now=now, limits=limits, label=label, pieces=pieces)
            return pieces

    def _head(self, fh: IO[bytes], end: int, limits: LogLimits, pieces: list[Piece], now: float) -> None:
        want = min(end - self.offset, limits.head_bytes - self.shipped)
        data = _read(fh, self.offset, want)
        if self.offset + len(data) < end:
            cut = data.rfind(b"\n") + 1
            data = data[:cut] if cut else data
            self.head_done, self.tokens, self.refilled_at = True, 0.0, now  # the first sample comes a burst later
        if data:
            pieces.append(data)
            self._advance(data)

    def _capped(self, fh: IO[bytes], end: int, *, final: bool, now: float, limits: LogLimits, label: str,
                pieces: list[Piece]) -> None:
        self.tokens = min(float(limits.burst_bytes), self.tokens + limits.rate_bytes_s * max(0.0, now - self.refilled_at))
        self.refilled_at = now
        if end - self.offset <= self.tokens:
            self._ship(fh, end, pieces, label)
            return
        if end - self.offset > limits.tail_bytes:
            self._skip(fh, _line_start(fh, end - limits.tail_bytes, end))
        if final:
            self._ship(fh, end, pieces, label)
        elif self.tokens >= limits.burst_bytes:
            # The bucket is full and the flood goes on: a sample of its newest lines.
            self._skip(fh, _line_start(fh, max(self.offset, end - limits.burst_bytes), end))
            self._ship(fh, end, pieces, label)

    def _ship(self, fh: IO[bytes], end: int, pieces: list[Piece], label: str) -> None:
        note = self._note(label)
        if note:
            pieces.append(note)
        data = _read(fh, self.offset, end - self.offset)
        self.tokens = max(0.0, self.tokens - len(data))
        pieces.append(data)
        self._advance(data)

    def _note(self, label: str) -> str:
        gap = self.gap_bytes
        if not gap:
            return ""
        self.gap_bytes = 0
        total = f"; {size_words(self.dropped_bytes)} in all" if self.dropped_bytes > gap else ""
        lines = (f"line {self.gap_first_line:,}" if self.gap_first_line == self.gap_last_line
                 else f"lines {self.gap_first_line:,}-{self.gap_last_line:,}")
        return f"[trainyard: {size_words(gap)} of output dropped from {label} ({lines}){total}; the head and the tail are kept]\n"

    def _advance(self, data: bytes) -> None:
        self.offset += len(data)
        self.lines += data.count(b"\n")
        self.shipped += len(data)

    def _skip(self, fh: IO[bytes], to: int) -> None:
        """Count [offset, to) as dropped, without keeping any of it."""
        if to <= self.offset:
            return
        if not self.gap_bytes:
            self.gap_first_line = self.lines + 1
        newlines, last = 0, b""
        fh.seek(self.offset)
        left = to - self.offset
        while left > 0:
            block = fh.read(min(READ_BLOCK, left))
            if not block:
                break
            newlines += block.count(b"\n")
            last = block[-1:]
            left -= len(block)
        self.lines += newlines
        self.gap_last_line = self.lines if last == b"\n" else self.lines + 1
        self.gap_bytes += to - self.offset
        self.dropped_bytes += to - self.offset
        self.offset = to


def _read(fh: IO[bytes], offset: int, n: int) -> bytes:
    fh.seek(offset)
    return fh.read(n)


def _complete_end(fh: IO[bytes], offset: int, size: int) -> int:
    """The end of the last complete line (a trailing fragment waits for its newline, unless it is
    a line too long to wait for)."""
    if size <= offset:
        return offset
    start = max(offset, size - LINE_SEARCH)
    cut = _read(fh, start, size - start).rfind(b"\n")
    if cut >= 0:
        return start + cut + 1
    return size if size - offset >= LINE_SEARCH else offset


def _line_start(fh: IO[bytes], pos: int, end: int) -> int:
    """The first line start at or after pos (pos itself when no line ends nearby)."""
    if pos <= 0:
        return 0
    data = _read(fh, pos - 1, min(LINE_SEARCH, end - pos + 1))
    cut = data.find(b"\n")
    return pos if cut < 0 else pos - 1 + cut + 1
