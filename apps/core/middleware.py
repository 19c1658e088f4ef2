"""Turns a database outage into a clear 503 instead of a 500 with a stack trace.

``process_exception`` covers exceptions raised by views. Failures in other middleware (loading
the session, the user, a CSRF check) are turned into responses by Django before they reach
this class; apps.core.errors.handler500 gives those the same 503. The ``__call__`` guard covers
what reaches here unconverted (DEBUG off or on, any handler).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

from apps.core.errors import (
    DATABASE_UNAVAILABLE,
    body_too_large_response,
    database_unavailable_response,
    error_body,
    handler404,
    is_database_unavailable,
)
from apps.core.jsonlimits import json_too_deep, too_deep_message

MESSAGE = DATABASE_UNAVAILABLE


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        except Exception as exc:
            if is_database_unavailable(exc):
                return database_unavailable_response(request, exc)
            raise

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # Only connection-level failures: a constraint violation is a bug to see, not a 503.
        if is_database_unavailable(exception):
            return database_unavailable_response(request, exception)
        return None


class PortalNotFoundMiddleware:
    """A page that is not there (another team's run, a deleted project) is the portal's own 404
    page even with DEBUG on (`TRAINYARD_DEBUG=true make run`; make run's default is off): Django's
    debug page listed every URL pattern and dropped the menu, for what is an everyday answer, not
    a bug. (Unknown URLs still get the debug page then, which is what a developer typing one wants.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404) and settings.DEBUG:
            return handler404(request, exception)
        return None


class NulByteMiddleware:
    """A query parameter holding a NUL character is a 400 naming it. PostgreSQL text cannot hold
    NUL, so such a value reaching a filter was a DataError and a 500 there (SQLite took it and
    matched nothing): schemathesis found it as GET /api/v1/runs/4/metrics/?key=%00."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return self._refuse(request, name.replace("\x00", "\\x00")[:40])
        return self.get_response(request)

    @staticmethod
    def _refuse(request: HttpRequest, field: str) -> HttpResponse:
        message = f"{field}: must not contain a NUL character (\\x00)"
        if request.path.startswith("/api/"):
            return JsonResponse(error_body(400, "invalid", message, {field: [message.split(": ", 1)[1]]}), status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


class JsonLimitsMiddleware:
    """JSON bodies over the upload limit are a 413, and those nested deeper than JSON_MAX_DEPTH a
    400, naming the limit, before any parser sees them (a 100,000-deep ``params`` was a RecursionError
    and a 500). Form fields get the same depth check: the new-run page takes JSON params in a
    textarea, and DRF's JSONField parses a form's value as JSON. DRF reads the body from
    ``request.body`` (or ``request.POST``) afterwards, so it is read once. Runs as process_view,
    before CSRF's (which reads forms), knowing the view: one without parsers reads and bounds
    its body itself (metric batches take up to 4 MiB) and keeps its own size limit."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any) -> HttpResponse | None:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        content_type = request.content_type or ""
        if content_type == "application/json" or content_type.endswith("+json"):
            view_class = getattr(view_func, "cls", None)
            # DRF views declaring no parsers read the raw stream with their own bound.
            bounds_itself = view_class is not None and getattr(view_class, "parser_classes", None) == []
            return self._check_json(request, bounds_itself=bounds_itself)
        if content_type == "application/x-www-form-urlencoded" or (
                content_type == "multipart/form-data" and not request.path.startswith("/api/")):
            # Multipart API bodies are left to DRF's parsers (apps.core.api.parsers checks them
            # there): reading an upload here would take it from the view's own upload handling.
            return self._check_form(request)
        return None

    def _check_json(self, request: HttpRequest, *, bounds_itself: bool) -> HttpResponse | None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0  # Django reads no body then either
        if limit is not None and size > limit:
            if bounds_itself:
                return None
            return body_too_large_response(request, size, limit)
        depth = json_too_deep(request.body)
        if depth is not None:
            return _refuse(request, "too_deep", "body", too_deep_message(depth), as_json=True)
        return None

    def _check_form(self, request: HttpRequest) -> HttpResponse | None:
        try:
            fields = request.POST
        except MultiPartParserError:
            return None  # a broken upload is the view's (or CSRF's) to refuse, as before
        for name, values in fields.lists():
            for value in values:
                depth = json_too_deep(value)
                if depth is not None:
                    return _refuse(request, "too_deep", name[:40], too_deep_message(depth))
        return None


def _refuse(request: HttpRequest, code: str, field: str, message: str, *, as_json: bool = False) -> HttpResponse:
    text = f"{field}: {message}"
    if as_json or request.path.startswith("/api/") or "json" in request.headers.get("Accept", ""):
        return JsonResponse(error_body(400, code, text, {field: [message]}), status=400)
    return HttpResponseBadRequest(text, content_type="text/plain; charset=utf-8")
