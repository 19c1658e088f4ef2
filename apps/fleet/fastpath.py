"""The usual heartbeat and claim, answered in front of Django's request handling (portal.wsgi).

With 1,000 agents these are 250 requests a second and most of the web's CPU; Django's middleware,
URL resolution and DRF cost as much again as the services' own statements (bench/load.py
--idle-agents). Taken here only: a well-formed body from a node in this process's credential
cache (apps.nodes.auth), on an allowed host, over HTTPS where required, that the snapshot
services answer. Anything else goes to Django unchanged, which answers it as always (its 400s
and 401s included); nothing is done twice, because the services decline before they write.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core import signals
from django.http.request import split_domain_port, validate_host

from apps.audit.context import acting_as
from apps.core.errors import DATABASE_UNAVAILABLE, FieldError, error_body, is_database_unavailable
from apps.fleet.api.fields import int_field
from apps.fleet.services import claim_answer, claim_wait_s, node_claim_wait_from_snapshot, node_heartbeat_from_snapshot
from apps.nodes.auth import NODE_CREDENTIAL_PREFIX, hash_secret, node_cache_get
from apps.nodes.models import Node

log = logging.getLogger(__name__)

HEARTBEAT_PATH = "/api/v1/agent/heartbeat/"
CLAIM_PATH = "/api/v1/agent/claim/"
# A heartbeat of a node with 8 GPUs and a gang running is a few KiB; bigger ones take Django's path.
MAX_BODY = 64 * 1024
MAX_BRACKETS = 4_096  # more than any heartbeat has: such a body goes to JsonLimitsMiddleware's checks

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# (status, body); None: Django takes the request.
Answer = tuple[int, dict[str, Any]] | None
_REASONS = {200: "200 OK", 409: "409 Conflict", 500: "500 Internal Server Error", 503: "503 Service Unavailable"}
_HEADERS = [("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff"), ("Vary", "Accept")]


def _heartbeat(node: Node, data: dict[str, Any]) -> Answer:
    answer = node_heartbeat_from_snapshot(node=node, data=data)
    return None if answer is None else (200, dict(answer))


def _claim(node: Node, data: dict[str, Any]) -> Answer:
    wait = claim_wait_s(data)
    if wait is None:
        return None  # ClaimView's 400 names the field and its limits
    answer = node_claim_wait_from_snapshot(node=node, session=data.get("session"), wait_s=wait)
    if answer is None:
        return None
    found, fresh = answer
    return claim_answer(found=found, node=fresh, session=data.get("session"))


_HANDLERS: dict[str, Callable[[Node, dict[str, Any]], Answer]] = {HEARTBEAT_PATH: _heartbeat, CLAIM_PATH: _claim}


class AgentFastPath:
    """WSGI middleware: the usual heartbeat and claim here, every other request to `app`."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        handler = _HANDLERS.get(environ.get("PATH_INFO", ""))
        if handler is None or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        body = _read_body(environ)
        node = _cached_node(environ) if body is not None else None
        data = _parse(body) if node is not None and body is not None else None
        if node is None or data is None:
            return self.app(environ, start_response)
        signals.request_started.send(sender=self.__class__, environ=environ)
        try:
            answer = _answer(handler, node, data)
        finally:
            signals.request_finished.send(sender=self.__class__)
        if answer is None:
            return self.app(environ, start_response)
        status, content = answer
        payload = json.dumps(content, separators=(",", ":")).encode()
        headers = [*_HEADERS, ("Content-Length", str(len(payload)))]
        if status == 503:
            headers.append(("Retry-After", "5"))
        start_response(_REASONS[status], headers)
        return [payload]


def _answer(handler: Callable[[Node, dict[str, Any]], Answer], node: Node, data: dict[str, Any]) -> Answer:
    try:
        with acting_as(label=f"agent:{node.hostname}"):
            return handler(node, data)
    except Exception as exc:
        # Once a service ran it may have written (a claim, once made, is the agent's): answer here,
        # as Django's handlers would, rather than run it again there.
        if is_database_unavailable(exc):
            log.warning("database unavailable (agent fast path): %s", exc)
            return 503, error_body(503, "database_unavailable", DATABASE_UNAVAILABLE)
        log.exception("agent request failed (fast path)")
        return 500, error_body(500, "server_error", "Internal server error; it has been logged.")


def _read_body(environ: dict[str, Any]) -> bytes | None:
    """The JSON body, if one this path may take (small, shallow enough, no NUL); the stream stays
    readable for Django either way."""
    if (environ.get("CONTENT_TYPE") or "").split(";")[0].strip() != "application/json":
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    if not 0 < length <= MAX_BODY:
        return None
    body: bytes = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    if len(body) != length or b"\\u0000" in body or body.count(b"[") + body.count(b"{") > MAX_BRACKETS:
        return None
    return body


def _parse(body: bytes) -> dict[str, Any] | None:
    """The body as an object with a valid session, else None (the views' 400s)."""
    try:
        data = json.loads(body)
        int_field(data, "session")  # the views' check: what they refuse, Django's path answers
    except (ValueError, FieldError):
        return None
    assert isinstance(data, dict)
    return data


def _cached_node(environ: dict[str, Any]) -> Node | None:
    """The node of `Authorization: Node <credential>` if this process has it cached, on an allowed
    host and, where HTTPS is required, over HTTPS (else Django's checks answer)."""
    scheme, _, secret = (environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
    if scheme.lower() != "node" or not secret.startswith(NODE_CREDENTIAL_PREFIX) or " " in secret:
        return None
    # As HttpRequest.get_host reads it (a proxy's forwarded host only where settings trust it).
    forwarded = settings.USE_X_FORWARDED_HOST and environ.get("HTTP_X_FORWARDED_HOST")
    domain, _ = split_domain_port(forwarded or environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    if settings.SECURE_SSL_REDIRECT:
        header = settings.SECURE_PROXY_SSL_HEADER
        if not (environ.get("wsgi.url_scheme") == "https" or (header is not None and environ.get(header[0]) == header[1])):
            return None
    return node_cache_get(hash_secret(secret))
