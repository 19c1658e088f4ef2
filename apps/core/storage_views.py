"""The local store's presigned URLs (apps.core.storage.LocalStore): GET reads and PUT writes the
one object a signed, unexpired token names. No session or credential: the token is the grant,
as an S3 presigned URL is. With S3 configured these URLs are never handed out; a download is
then store_redirect's 302 to the S3 store's presigned URL."""

from __future__ import annotations

from typing import IO, TypeVar

from django.conf import settings
from django.core import signing
from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from apps.core.storage import CHUNK, LocalStore, ObjectMissing, local_token_read, store

Answer = TypeVar("Answer", bound=HttpResponseBase)


def no_store(response: Answer) -> Answer:
    """`response`, marked for no cache to keep: for every answer that hands out a presigned URL
    (a redirect to one, or JSON with one in it). The URL expires and is a grant by itself; a
    replayed copy would fail late or reach someone it was not given to. No-store answers also get
    no ETag (apps.core.conditional)."""
    response["Cache-Control"] = "private, no-store"
    return response


def store_redirect(url: str) -> HttpResponseRedirect:
    """The 302 every download answers with when the bytes come from the store (a presigned URL)."""
    return no_store(HttpResponseRedirect(url))


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"status": status, "code": code, "message": message, "fields": {}}}, status=status)


class _Bounded:
    """The request body, read up to the size the token allows (one byte more shows an overrun)."""

    def __init__(self, body: IO[bytes], limit: int) -> None:
        self.body, self.left = body, limit + 1

    def read(self, n: int = CHUNK) -> bytes:
        if self.left <= 0:
            return b""
        chunk = self.body.read(min(n, self.left))
        self.left -= len(chunk)
        return chunk


@csrf_exempt
@require_http_methods(["GET", "PUT"])
def storage_object(request: HttpRequest) -> HttpResponseBase:
    local = store()
    if not isinstance(local, LocalStore):
        return _error(404, "not_found", "this portal keeps objects in S3; ask for a new URL")
    try:
        key, size = local_token_read(request.GET.get("t", ""), method=request.method or "GET")
    except signing.SignatureExpired:
        return _error(403, "expired", f"the URL expired (valid {settings.TRAINYARD_STORAGE_URL_TTL_S} s); ask for a new one")
    except signing.BadSignature:
        return _error(403, "bad_signature", "not a URL this portal signed")
    if request.method == "GET":
        try:
            return FileResponse(local.get(key), content_type="application/octet-stream")
        except ObjectMissing:
            return _error(404, "not_found", "no such object")
    declared = int(request.META.get("CONTENT_LENGTH") or -1)
    if declared != size:
        return _error(400, "size_mismatch", f"the URL is for {size} bytes; the body says {declared}")
    local.put(key, _Bounded(request, size))  # type: ignore[arg-type]
    if local.size(key) != size:
        local.delete(key)
        return _error(400, "size_mismatch", f"the URL is for {size} bytes; another size arrived")
    return HttpResponse(status=200, headers={"ETag": '"local"'})
