"""DRF's parsers with Trainyard's limits. JSON refuses NUL characters: PostgreSQL's text and
jsonb cannot hold them, so a "\\u0000" in a run name, a tag or a param reached the database as
a DataError and a 500 there (SQLite stored it); a 400 names the field instead. Every parser
refuses nesting deeper than JSON_MAX_DEPTH before anything json.loads it: the JSON body here,
form fields (which DRF's JSONField parses as JSON) after the form is read.
apps.core.middleware.JsonLimitsMiddleware checks JSON bodies earlier still, for every view."""

from __future__ import annotations

import io
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ValidationError

from apps.core.jsonlimits import json_too_deep, too_deep_message


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
        raw = stream.read() if stream is not None else b""
        depth = json_too_deep(raw)
        if depth is not None:
            raise ValidationError({"body": [too_deep_message(depth)]}, code="too_deep")
        data = super().parse(io.BytesIO(raw), media_type, parser_context)
        where = _nul_path(data, "")
        if where is not None:
            raise ValidationError({where or "body": ["must not contain a NUL character (\\u0000)"]})
        return data


def _refuse_deep_fields(fields: Any) -> None:
    """A form field DRF's JSONField would json.loads (a `params` sent as form data)."""
    for name, values in fields.lists():
        for value in values:
            depth = json_too_deep(value)
            if depth is not None:
                raise ValidationError({str(name)[:40]: [too_deep_message(depth)]}, code="too_deep")


class FormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        _refuse_deep_fields(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        result = super().parse(stream, media_type, parser_context)
        _refuse_deep_fields(result.data)
        return result
