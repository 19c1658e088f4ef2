"""Keeps outgoing webhooks off the portal's own network (SSRF).

A team admin chooses the URL and the portal's workers POST to it from inside the deployment, so
without a guard a webhook could reach the cloud metadata service (169.254.169.254), the
database, Redis or any internal admin page. Refused: schemes other than http(s), loopback,
link-local, private (RFC 1918, unique-local IPv6), shared (100.64/10), multicast, reserved and
unspecified addresses, and names that resolve to any of them.

The check runs twice: when a URL is saved (:func:`webhook_url_check`, a 400 naming the field)
and at every delivery on the address actually connected to (:func:`guarded_urlopen`), since a
name can resolve to a public address when saved and to 127.0.0.1 later (DNS rebinding).
Redirects go through the same check; proxies from the environment are not used, since the
guard must see the real destination.

``TRAINYARD_WEBHOOK_ALLOW_PRIVATE`` turns the address checks off (tests, a laptop with a local
receiver); the scheme check stays.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings

from apps.core.errors import FieldError

SCHEMES = ("http", "https")


class BlockedAddress(Exception):
    """The destination is one the guard refuses (not an OSError: urllib must not wrap it)."""


def allow_private() -> bool:
    return bool(getattr(settings, "TRAINYARD_WEBHOOK_ALLOW_PRIVATE", False))


def address_refusal(ip: str) -> str | None:
    """Why this address may not be a webhook destination, or None when it is a public one."""
    try:
        addr: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if addr.is_unspecified:
        return "the unspecified address"
    if addr.is_multicast:
        return "a multicast address"
    if addr.is_private:
        return "a private address"
    if addr.is_reserved or not addr.is_global:
        return "not a public address"
    return None


def _resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise BlockedAddress(f"cannot resolve host {host!r}: {err}") from None


def _check_host(host: str, port: int) -> list[tuple[Any, ...]]:
    """The host's addresses (getaddrinfo tuples), every one of them allowed, else BlockedAddress."""
    if not allow_private() and (host.lower() == "localhost" or host.lower().endswith(".localhost")):
        raise BlockedAddress(f"host {host!r} is this machine")
    infos = _resolve(host, port)
    if not allow_private():
        for info in infos:
            ip = str(info[4][0])
            reason = address_refusal(ip)
            if reason:
                shown = host if host == ip else f"{host} ({ip})"
                raise BlockedAddress(f"{shown} is {reason}")
    return infos


def webhook_url_check(url: Any, *, field: str = "url") -> str:
    """The cleaned URL, or a FieldError naming ``field``: http(s), at most 500 characters, a
    host, and (unless TRAINYARD_WEBHOOK_ALLOW_PRIVATE) only public addresses."""
    text = str(url or "").strip()
    if len(text) > 500 or any(c.isspace() for c in text):
        raise FieldError(field, "must be an http(s) URL of at most 500 characters, without spaces")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise FieldError(field, f"not a valid URL ({err})") from None
    if parts.scheme not in SCHEMES:
        raise FieldError(field, f"must be an http(s) URL (got scheme {parts.scheme or 'none'!r})")
    if not parts.hostname:
        raise FieldError(field, "must name a host")
    if allow_private():
        return text
    try:
        _check_host(parts.hostname, port)
    except BlockedAddress as err:
        raise FieldError(field, f"refused: {err}; webhooks may only target public addresses "
                                "(TRAINYARD_WEBHOOK_ALLOW_PRIVATE allows others)") from None
    return text


def _guarded_socket(host: str, port: int, timeout: Any, source_address: Any) -> socket.socket:
    """Connects to an address of ``host`` that passed the check: the one checked, not a fresh
    lookup that could answer differently."""
    last: OSError | None = None
    for family, socktype, proto, _name, sockaddr in _check_host(host, port):
        sock = socket.socket(family, socktype, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as err:
            sock.close()
            last = err
    raise last or OSError(f"no address for {host!r}")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = _guarded_socket(self.host, self.port, self.timeout, getattr(self, "source_address", None))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        sock = _guarded_socket(self.host, self.port, self.timeout, getattr(self, "source_address", None))
        # The certificate is checked against the host name, not the address connected to.
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_GuardedHTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_GuardedHTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


def _opener() -> urllib.request.OpenerDirector:
    # Built by hand, not with build_opener: that would add proxy, FTP, file and data handlers,
    # and a redirect to ftp:// would then leave through an unguarded one.
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.UnknownHandler(), _HTTPHandler(), _HTTPSHandler(), urllib.request.HTTPDefaultErrorHandler(),
                    urllib.request.HTTPRedirectHandler(), urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


_OPENER = _opener()


def guarded_urlopen(request: urllib.request.Request, *, timeout: float) -> Any:
    """urllib's urlopen for webhook deliveries: raises BlockedAddress for a refused destination
    (also after a redirect), else behaves like urlopen."""
    if urllib.parse.urlsplit(request.full_url).scheme not in SCHEMES:
        raise BlockedAddress(f"scheme of {request.full_url[:100]!r} is not http(s)")
    return _OPENER.open(request, timeout=timeout)
