"""ETags on API reads, so pollers pay for a body only when it changed.

Every successful, non-streaming GET under /api/ gets an ETag (a hash of the body) and
``Cache-Control: private, no-cache`` (any cache may keep it for this user only, and must
revalidate each time); a request whose If-None-Match matches gets a 304 with no body. Browsers
do this by themselves, so the pages' polling (fetch) keeps working and saves the transfer.
Errors, streams, file downloads and answers marked no-store (apps.core.storage_views.no_store:
those that hand out presigned URLs) pass through without an ETag. HTML pages are left alone: their
bodies carry a per-request CSRF token, an ETag would never match; fragments without one that
pages poll call `revalidated` themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers, set_response_etag


class ApiConditionalGetMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.method != "GET" or not request.path.startswith("/api/"):
            return response
        if not isinstance(response, HttpResponse) or not 200 <= response.status_code < 300:
            return response
        if not response.has_header("Cache-Control"):
            patch_cache_control(response, private=True, no_cache=True)
        # The body depends on who asks: a shared cache must not hand one user's answer to another.
        patch_vary_headers(response, ["Authorization"])
        if "no-store" in response.get("Cache-Control", ""):
            return response
        return revalidated(request, response)


def revalidated(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """`response` with an ETag (a hash of its body) and, unless it says otherwise, `private,
    no-cache`; a 304 without a body when the request's If-None-Match matches. Also for HTML
    fragments that pages poll, when they carry no CSRF token (new on every response)."""
    if not response.has_header("Cache-Control"):
        patch_cache_control(response, private=True, no_cache=True)
    if not response.has_header("ETag"):
        set_response_etag(response)
    etag = response.get("ETag")
    if not etag:
        return response
    return get_conditional_response(request, etag=etag, response=response) or response
