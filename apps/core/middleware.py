"""Turns a database outage into a clear 503 instead of a 500 with a stack trace."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from apps.core.errors import error_body

log = logging.getLogger(__name__)

MESSAGE = "The database is unavailable right now; nothing was changed. Please retry shortly."


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # Only connection-level failures: a constraint violation is a bug to see, not a 503.
        if isinstance(exception, (OperationalError, InterfaceError)) and not _is_lock_timeout(exception):
            log.warning("database unavailable: %s", exception)
            response = JsonResponse(error_body(503, "database_unavailable", MESSAGE), status=503)
            response["Retry-After"] = "5"
            return response
        return None


def _is_lock_timeout(exc: Exception) -> bool:
    return "locked" in str(exc).lower()
