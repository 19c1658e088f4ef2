"""What apps above runs add to the runs list's rows: a registry they fill in AppConfig.ready
(runs may not import them). Each extra gets the request's query parameters and the page's
serialized rows, and adds its own keys to them (or raises FieldError for a bad parameter)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import QueryDict

RunListExtra = Callable[[QueryDict, list[dict[str, Any]]], None]
RUN_LIST_EXTRAS: list[RunListExtra] = []
