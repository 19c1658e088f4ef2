"""Turns a database outage into a clear 503 instead of a 500 with a stack trace.

``process_exception`` covers exceptions raised by views. Failures in other middleware (loading
the session, the user, a CSRF check) are turned into responses by Django before they reach
this class; apps.core.errors.handler500 gives those the same 503. The ``__call__`` guard covers
what reaches here unconverted (DEBUG off or on, any handler).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from apps.core.errors import DATABASE_UNAVAILABLE, database_unavailable_response, error_body, handler404, is_database_unavailable

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
    page even with DEBUG on, as under `make run`: Django's debug page listed every URL pattern
    and dropped the menu, for what is an everyday answer, not a bug. (Unknown URLs still get the
    debug page, which is what a developer typing one wants.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404) and settings.DEBUG:
            return handler404(request, exception)  # type: ignore[no-any-return]
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
