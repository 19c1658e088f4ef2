"""Errors raised by services, and the one place that turns any error into the API's JSON shape.

Every API error body is ``{"error": {"status", "code", "message", "fields"}}`` so scripts can
rely on one shape whatever went wrong.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

from apps.core.jsonlimits import too_large_message


class ServiceError(Exception):
    """A refusal by a service: bad input (400) unless a subclass says otherwise."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        if code:
            self.code = code


class FieldError(ServiceError):
    """Bad input in one named field."""

    def __init__(self, field: str, message: str, *, code: str | None = None) -> None:
        super().__init__(f"{field}: {message}", fields={field: [message]}, code=code)


class Conflict(ServiceError):
    """The object is in a state where this action does not apply (409)."""

    status_code = 409
    code = "conflict"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class Forbidden(ServiceError):
    status_code = 403
    code = "forbidden"


def error_body(status_code: int, code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"status": status_code, "code": code, "message": message, "fields": fields or {}}}


def _flatten(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            if isinstance(value, (list, tuple)):
                out[str(key)] = [str(v) if not isinstance(v, dict) else str(v) for v in value]
            elif isinstance(value, dict):
                for sub, msgs in _flatten(value).items():
                    out[f"{key}.{sub}"] = msgs
            else:
                out[str(key)] = [str(value)]
        return out
    return {}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.status_code, exc.code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, (ProtectedError, RestrictedError)):
        # Deleting an object others still point at (a project with runs): a state conflict, not a 500.
        names = sorted({obj._meta.verbose_name_plural for obj in list(exc.args[1])[:50]}) if len(exc.args) > 1 else []
        message = "Cannot delete: it is still referenced" + (f" by {', '.join(str(n) for n in names)}" if names else "") + "."
        return Response(error_body(409, "protected", message), status=409)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    assert isinstance(exc, exceptions.APIException)
    fields = _flatten(exc.detail) if isinstance(exc.detail, dict) else {}
    if fields:
        # DRF's key for errors of the whole body is no field name to show.
        message = "; ".join(' '.join(msgs) if field == api_settings.NON_FIELD_ERRORS_KEY else f"{field}: {' '.join(msgs)}"
                            for field, msgs in fields.items())
        code = "invalid"
    else:
        message = str(exc.detail[0] if isinstance(exc.detail, list) and exc.detail else exc.detail)
        code = exc.default_code if isinstance(exc.default_code, str) else "error"
        if isinstance(exc.detail, exceptions.ErrorDetail):
            code = exc.detail.code or code
    response.data = error_body(response.status_code, code, message, fields)
    return response


log = logging.getLogger(__name__)

DATABASE_UNAVAILABLE = "The database is unavailable right now; nothing was changed. Please retry shortly."


def is_database_unavailable(exc: BaseException | None) -> bool:
    """A connection-level database failure (not a constraint violation, not a busy SQLite lock)."""
    return isinstance(exc, (OperationalError, InterfaceError)) and "locked" not in str(exc).lower()


def database_unavailable_response(request: HttpRequest, exc: BaseException) -> HttpResponse:
    log.warning("database unavailable (%s %s): %s", request.method, request.path, exc)
    response: HttpResponse
    if request.path.startswith("/api/") or "json" in request.headers.get("Accept", ""):
        response = JsonResponse(error_body(503, "database_unavailable", DATABASE_UNAVAILABLE), status=503)
    else:
        # No template: rendering base.html would ask the database for the user again.
        response = HttpResponse(f"<!doctype html><title>Unavailable</title><h1>Service unavailable</h1><p>{DATABASE_UNAVAILABLE}</p>",
                                status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = "5"
    return response


def json_error_response(status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(status_code, code, message), status=status_code)


def handler404(request: HttpRequest, exception: Exception | None = None) -> Any:
    if request.path.startswith("/api/"):
        return json_error_response(status.HTTP_404_NOT_FOUND, "not_found", "Not found.")
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Http404())


def handler500(request: HttpRequest) -> Any:
    # Reached for exceptions outside the view too (session, auth and other middleware), which
    # DatabaseUnavailableMiddleware.process_exception never sees: a database outage is a 503.
    exc = sys.exc_info()[1]
    if is_database_unavailable(exc):
        assert exc is not None
        return database_unavailable_response(request, exc)
    if request.path.startswith("/api/"):
        return json_error_response(500, "server_error", "Internal server error; it has been logged.")
    from django.views.defaults import server_error

    return server_error(request)


def handler403(request: HttpRequest, exception: Exception | None = None) -> Any:
    if request.path.startswith("/api/"):
        return json_error_response(403, "forbidden", "You do not have permission to perform this action.")
    from django.views.defaults import permission_denied

    return permission_denied(request, exception or DjangoPermissionDenied())


def handler400(request: HttpRequest, exception: Exception | None = None) -> Any:
    if isinstance(exception, RequestDataTooBig) and settings.DATA_UPLOAD_MAX_MEMORY_SIZE is not None:
        # Django refused a body over DATA_UPLOAD_MAX_MEMORY_SIZE (a form; JSON is refused earlier,
        # by JsonLimitsMiddleware): say what the limit is instead of a bare "Bad request".
        length = str(request.META.get("CONTENT_LENGTH") or "")
        size = int(length) if length.isdigit() else 0
        if request.path.startswith("/api/"):
            return body_too_large_response(request, size, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        detail = too_large_message(size, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        drain_body(request, size)
        return HttpResponse(f"body: {detail}", status=400, content_type="text/plain; charset=utf-8")
    if request.path.startswith("/api/"):
        return json_error_response(400, "bad_request", "Bad request.")
    from django.views.defaults import bad_request

    return bad_request(request, exception or Exception())


# A refused oversized body is read and dropped up to this much, so that the client gets the
# answer rather than a connection reset mid-upload (a server that closes a connection with unread
# data resets it); anything larger is not worth the reading. 64 MiB covers a 50 MB post.
DRAIN_MAX_BYTES = 64 * 1024 * 1024


def drain_body(request: HttpRequest, size: int) -> None:
    """Read and drop the unread body of a refused request (at most DRAIN_MAX_BYTES)."""
    if size > DRAIN_MAX_BYTES:
        return
    try:
        while request.read(1024 * 1024):
            pass
    except OSError:
        pass  # the client went away: nothing to answer anyway


def body_too_large_response(request: HttpRequest, size: int, limit: int) -> JsonResponse:
    """A body over the upload limit: a 413 in the API's shape, naming the size and the limit."""
    detail = too_large_message(size, limit=limit)
    drain_body(request, size)
    return JsonResponse(error_body(413, "too_large", f"body: {detail}", {"body": [detail]}), status=413)
