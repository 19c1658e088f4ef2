from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from apps.audit.context import acting_as


def client_ip(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a trusted proxy rewrites it,
    # and production sets it through the proxy's own REMOTE_ADDR handling.
    return request.META.get("REMOTE_ADDR") or None


class AuditContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        # DRF token users are only known inside the view; services read request.user lazily
        # through audit_record(request=...) when they have it, else this session user.
        with acting_as(user=user if user is not None and user.is_authenticated else None, label="", ip=client_ip(request)):
            return self.get_response(request)
