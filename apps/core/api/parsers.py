"""DRF's JSON parser, refusing NUL characters: PostgreSQL's text and jsonb cannot hold them, so
a "\\u0000" in a run name, a tag or a param reached the database as a DataError and a 500 there
(SQLite stored it). A 400 names the field instead."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ValidationError


def _nul_path(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where.replace("\x00", "\\x00")
            found = _nul_path(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}.{index}" if path else str(index))
            if found:
                return found
    return None


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        where = _nul_path(data, "")
        if where is not None:
            raise ValidationError({where or "body": ["must not contain a NUL character (\\u0000)"]})
        return data
