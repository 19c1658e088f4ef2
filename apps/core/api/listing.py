"""List controls shared by every API list: strict ``?ordering=`` and ``?updated_after=``.

DRF's own OrderingFilter drops an unknown field silently, so a script that misspells one gets
the default order and never knows; here it is a 400 that names the field and the allowed
values. Views declare what may be ordered on:

    ordering_fields = {"created_at": "created_at", "pool": "pool__name"}   # public name -> ORM path
    ordering = ["-created_at", "-id"]                                       # the default

and, for cheap polling, which timestamp ``updated_after`` compares (``updated_after_field``).
Both backends act on list actions only: a retrieve with a stray ``?ordering=`` is not refused.
Views that are not list actions (a run's checkpoints, the nodes overview) call
:func:`ordering_apply` and :func:`updated_after_apply` themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import dateparse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.filters import BaseFilterBackend
from rest_framework.request import Request

from apps.core.dates import datetime_utc
from apps.core.errors import FieldError

ORDERING_PARAM = "ordering"
UPDATED_AFTER_PARAM = "updated_after"


def _field_map(fields: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    return dict(fields) if isinstance(fields, Mapping) else {name: name for name in fields}


def ordering_choices(fields: Mapping[str, str] | Sequence[str]) -> list[str]:
    """Every accepted single value: each field ascending and descending."""
    return [value for name in _field_map(fields) for value in (name, f"-{name}")]


def ordering_parse(raw: str | None, *, fields: Mapping[str, str] | Sequence[str]) -> list[str] | None:
    """ORM order_by terms for ``raw`` ("-created_at,id"), None when absent; FieldError when bad."""
    if raw is None or not raw.strip():
        return None
    allowed = _field_map(fields)
    terms: list[str] = []
    for part in raw.split(","):
        term = part.strip()
        name = term[1:] if term.startswith("-") else term
        if name not in allowed:
            shown = term or "(empty)"
            raise FieldError(ORDERING_PARAM, f"unknown field {shown!r}; allowed: {', '.join(allowed)} (prefix '-' for descending, "
                                             "comma-separate several)")
        terms.append(("-" if term.startswith("-") else "") + allowed[name])
    # A unique tie-breaker keeps pages stable when many rows share a value (a status).
    if not any(t.lstrip("-") in ("pk", "id") for t in terms):
        terms.append("-pk" if terms[0].startswith("-") else "pk")
    return terms


def ordering_apply(queryset: QuerySet[Any], request: Request, *, fields: Mapping[str, str] | Sequence[str],
                   default: Sequence[str] | None = None) -> QuerySet[Any]:
    terms = ordering_parse(request.query_params.get(ORDERING_PARAM), fields=fields)
    if terms is not None:
        return queryset.order_by(*terms)
    return queryset.order_by(*default) if default else queryset


def ordering_parameter(fields: Mapping[str, str] | Sequence[str], default: str) -> OpenApiParameter:
    return OpenApiParameter(
        ORDERING_PARAM, OpenApiTypes.STR, enum=ordering_choices(fields),
        description=f"Sort by this field; prefix '-' for descending. Several may be comma-separated (the enum lists single "
                    f"values). Default: {default}. An unknown field is a 400 that lists the allowed ones.",
    )


def datetime_param(request: Request, name: str) -> datetime | None:
    """An ISO 8601 date-time query parameter (naive = UTC) in UTC, None when absent; FieldError
    when bad or out of range (apps.core.dates)."""
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    parsed = None
    # An unencoded '+' of a UTC offset arrives as a space: "2025-01-31T12:00:00 00:00".
    for candidate in (text, text.replace(" ", "+")):
        try:
            parsed = dateparse.parse_datetime(candidate)
        except ValueError:
            parsed = None
        if parsed is not None:
            break
    if parsed is None:
        raise FieldError(name, f"must be an ISO 8601 date-time such as 2025-01-31T12:00:00Z (got {raw[:40]!r})")
    return datetime_utc(parsed, field=name)


def updated_after_apply(queryset: QuerySet[Any], request: Request, *, field: str = "updated_at") -> QuerySet[Any]:
    after = datetime_param(request, UPDATED_AFTER_PARAM)
    return queryset if after is None else queryset.filter(**{f"{field}__gt": after})


def updated_after_parameter(field: str = "updated_at") -> OpenApiParameter:
    return OpenApiParameter(
        UPDATED_AFTER_PARAM, OpenApiTypes.DATETIME,
        description=f"Only items whose {field} is later than this ISO 8601 date-time (naive means UTC): poll with the "
                    f"newest {field} you have seen. A malformed value is a 400.",
    )


def _is_list(view: Any) -> bool:
    return getattr(view, "action", "list") == "list"


class OrderingBackend(BaseFilterBackend):
    """``?ordering=`` from the view's ``ordering_fields``; unknown fields are a 400."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        fields = getattr(view, "ordering_fields", None)
        if not fields or not _is_list(view):
            return queryset
        return ordering_apply(queryset, request, fields=fields, default=getattr(view, "ordering", None))

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        fields = getattr(view, "ordering_fields", None)
        if not fields:
            return []
        default = ",".join(getattr(view, "ordering", None) or []) or "by id"
        return [{"name": ORDERING_PARAM, "required": False, "in": "query",
                 "description": ordering_parameter(fields, default).description,
                 "schema": {"type": "string", "enum": ordering_choices(fields)}}]


class UpdatedAfterBackend(BaseFilterBackend):
    """``?updated_after=<ISO date-time>`` on the view's ``updated_after_field`` (default updated_at)."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        if not _is_list(view):
            return queryset
        return updated_after_apply(queryset, request, field=getattr(view, "updated_after_field", "updated_at"))

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        field = getattr(view, "updated_after_field", "updated_at")
        return [{"name": UPDATED_AFTER_PARAM, "required": False, "in": "query",
                 "description": updated_after_parameter(field).description,
                 "schema": {"type": "string", "format": "date-time"}}]


LIST_BACKENDS = [OrderingBackend]
POLLING_LIST_BACKENDS = [OrderingBackend, UpdatedAfterBackend]
