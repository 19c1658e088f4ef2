"""Tables for the run page from CSV and JSON artifacts, parsed with limits: at most
PREVIEW_BYTES read, PREVIEW_ROWS rows, PREVIEW_COLUMNS columns and CELL_CHARS per cell. Plain
Python (no Django): bytes in, a Table out."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

PREVIEW_BYTES = 256 * 1024
PREVIEW_ROWS = 50
PREVIEW_COLUMNS = 30
CELL_CHARS = 200
JSON_MAX_DEPTH = 64


@dataclass(frozen=True)
class Table:
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    more_rows: bool = False  # the file holds rows past those shown
    more_columns: bool = False
    problem: str = ""  # why there is no table (then columns and rows are empty)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=True)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def csv_table(data: bytes, *, truncated: bool) -> Table:
    """The first rows of a CSV file (the first row is the header). `truncated`: data is only the
    file's head, so its last line may be cut and is dropped."""
    text = data.decode("utf-8-sig", errors="replace")
    if truncated and "\n" in text:
        text = text[:text.rfind("\n") + 1]
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    rows: list[list[str]] = []
    more_rows = truncated
    try:
        for row in reader:
            if len(rows) > PREVIEW_ROWS:  # the header and PREVIEW_ROWS rows
                more_rows = True
                break
            rows.append(row)
    except csv.Error as err:
        return Table(problem=f"not readable as CSV: {err}")
    if not rows:
        return Table(problem="empty")
    width = max(len(r) for r in rows)
    header, body = rows[0], rows[1:]
    columns = [_cell(c) for c in header[:PREVIEW_COLUMNS]] + [""] * max(0, min(width, PREVIEW_COLUMNS) - len(header))
    cut = len(columns)
    return Table(columns=columns, rows=[[_cell(c) for c in r[:cut]] + [""] * (cut - len(r[:cut])) for r in body],
                 more_rows=more_rows, more_columns=width > PREVIEW_COLUMNS)


def _too_deep(text: str) -> bool:
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > JSON_MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def json_table(data: bytes, *, truncated: bool) -> Table:
    """A table of a JSON file: a list of objects (one row each, columns their keys), a list of
    values (one column), an object of lists (one column each) or an object (key and value)."""
    if truncated:
        return Table(problem=f"larger than {PREVIEW_BYTES // 1024} KiB: too large to preview")
    text = data.decode("utf-8-sig", errors="replace")
    if _too_deep(text):
        return Table(problem=f"nested deeper than {JSON_MAX_DEPTH} levels: not previewed")
    try:
        value = json.loads(text)
    except ValueError as err:
        return Table(problem=f"not valid JSON: {err}")
    if isinstance(value, list):
        return _rows_table(value)
    if isinstance(value, dict):
        if value and all(isinstance(v, list) for v in value.values()):
            columns = list(value)[:PREVIEW_COLUMNS]
            length = max(len(value[c]) for c in columns)
            records = [{c: value[c][i] if i < len(value[c]) else None for c in columns} for i in range(min(length, PREVIEW_ROWS + 1))]
            table = _rows_table(records)
            return Table(columns=table.columns, rows=table.rows, more_rows=length > PREVIEW_ROWS,
                         more_columns=len(value) > PREVIEW_COLUMNS)
        items = list(value.items())
        return Table(columns=["key", "value"], rows=[[_cell(k), _cell(v)] for k, v in items[:PREVIEW_ROWS]],
                     more_rows=len(items) > PREVIEW_ROWS)
    return Table(columns=["value"], rows=[[_cell(value)]])


def _rows_table(items: list[Any]) -> Table:
    shown = items[:PREVIEW_ROWS]
    if shown and all(isinstance(i, dict) for i in shown):
        columns: list[str] = []
        for item in shown:
            for key in item:
                if key not in columns:
                    columns.append(key)
        cut = columns[:PREVIEW_COLUMNS]
        return Table(columns=[_cell(c) for c in cut], rows=[[_cell(item.get(c)) for c in cut] for item in shown],
                     more_rows=len(items) > PREVIEW_ROWS, more_columns=len(columns) > PREVIEW_COLUMNS)
    return Table(columns=["value"], rows=[[_cell(i)] for i in shown], more_rows=len(items) > PREVIEW_ROWS)
