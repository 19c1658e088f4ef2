"""How deep a JSON text nests, measured on the raw text before anything parses it.

Python's json (and everything that walks the result recursively) raised RecursionError on a
params value nested 100,000 levels deep: a 500. Counting brackets outside strings costs no
recursion at all, so a request can be refused before json.loads ever sees it.
"""

from __future__ import annotations

import re
from itertools import accumulate

# Arrays and objects inside each other; no template's parameters come near it.
JSON_MAX_DEPTH = 64

# A JSON string, escapes included (possessive: linear on any input, closed or not).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(text: bytes | str) -> int:
    """The deepest nesting of arrays and objects in `text` (0 for a scalar). Brackets inside
    strings do not count; for text that is not valid JSON it is an estimate, never an error."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") == 0:
        return 0
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(0, max(accumulate(_STEP[b] for b in brackets), default=0))


def json_too_deep(text: bytes | str, *, limit: int = JSON_MAX_DEPTH) -> int | None:
    """The depth of `text` when it is over `limit`, else None."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") <= limit:  # cannot nest deeper than it has brackets
        return None
    depth = json_depth(raw)
    return depth if depth > limit else None


def too_deep_message(depth: int, *, limit: int = JSON_MAX_DEPTH) -> str:
    return f"JSON nested {depth} levels deep; the limit is {limit} levels of arrays and objects"


def too_large_message(size: int, *, limit: int) -> str:
    mib = f" ({limit / 1024 / 1024:.1f} MiB)" if limit >= 1024 * 1024 else ""
    return f"request body is {size:,} bytes; the limit is {limit:,} bytes{mib}"
