"""Turns a database outage into a clear 503 instead of a 500 with a stack trace.

``process_exception`` covers exceptions raised by views. Failures in other middleware (loading
the session, the user, a CSRF check) are turned into responses by Django before they reach
this class; apps.core.errors.handler500 gives those the same 503. The ``__call__`` guard covers
what reaches here unconverted (DEBUG off or on, any handler).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse

from apps.core.errors import DATABASE_UNAVAILABLE, database_unavailable_response, handler404, is_database_unavailable

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
