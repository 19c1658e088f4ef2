"""The webhook SSRF guard: internal destinations are refused when a URL is saved (a 400 naming
the field) and again at delivery on the address actually connected to (DNS rebinding,
redirects). The test settings allow private addresses for the local receivers; these tests turn
the guard on as production has it."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from apps.core import urlguard
from apps.webhooks import services
from apps.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.django_db

PUBLIC_IP = "93.184.216.34"  # a public address; creation checks it without connecting


@pytest.fixture
def guard_on(settings: Any) -> None:
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def create(cast: Any, url: str) -> Any:
    return cast.client(cast.alice).post("/api/v1/webhooks/", {"project": "vision/digits", "url": url}, format="json")


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:8000/hook", "loopback"),
    ("http://localhost/hook", "this machine"),
    ("http://api.localhost/hook", "this machine"),
    ("http://[::1]/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "loopback"),
    ("http://2130706433/hook", "loopback"),  # 127.0.0.1 as one number
    ("http://0x7f000001/hook", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[fe80::1]/hook", "link-local"),
    ("http://10.1.2.3/hook", "private"),
    ("http://172.16.0.9/hook", "private"),
    ("https://192.168.1.1/hook", "private"),
    ("http://[fd00::1]/hook", "private"),
    ("http://100.64.0.1/hook", "not a public"),
    ("http://0.0.0.0/hook", "unspecified"),
    ("http://224.0.0.1/hook", "multicast"),
    ("http://no-such-host.invalid/hook", "cannot resolve"),
])
def test_internal_destinations_are_refused_at_creation(cast: Any, guard_on: None, url: str, why: str) -> None:
    response = create(cast, url)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == ["url"]
    assert why in error["message"], error["message"]
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO", "http:///nohost",
                                 "javascript:alert(1)", "http://exa mple.com/"])
def test_non_http_schemes_and_malformed_urls_are_refused_even_when_private_is_allowed(cast: Any, url: str) -> None:
    response = create(cast, url)
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["url"]


def test_public_destination_is_accepted_and_a_change_to_an_internal_one_is_refused(cast: Any, guard_on: None) -> None:
    response = create(cast, f"https://{PUBLIC_IP}/hook")
    assert response.status_code == 201, response.content
    hook = response.json()
    patched = cast.client(cast.alice).patch(f"/api/v1/webhooks/{hook['id']}/", {"url": "http://169.254.169.254/"}, format="json")
    assert patched.status_code == 400 and list(patched.json()["error"]["fields"]) == ["url"]
    assert WebhookEndpoint.objects.get(pk=hook["id"]).url == f"https://{PUBLIC_IP}/hook"


def test_setting_allows_a_local_receiver(cast: Any, settings: Any) -> None:
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
    assert create(cast, "http://127.0.0.1:9/hook").status_code == 201
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    assert create(cast, "http://127.0.0.1:9/hook").status_code == 400


def _pending_delivery(cast: Any, url: str) -> WebhookDelivery:
    endpoint = WebhookEndpoint.objects.create(project=cast.digits, url=url, secret="whsec_" + "s" * 20)
    services.webhook_emit(project_id=cast.digits.pk, event="run.failed", payload={"run": {"id": 1}}, endpoint_ids=[endpoint.pk])
    return WebhookDelivery.objects.get(endpoint=endpoint)


def test_delivery_rechecks_the_address_and_does_not_retry_a_refusal(cast: Any, receiver: Receiver, settings: Any) -> None:
    # Saved while private addresses were allowed (or straight in the database): delivery still refuses.
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
    delivery = _pending_delivery(cast, receiver.url)
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    assert services.webhook_deliver(delivery_id=delivery.pk) is None  # no retry scheduled
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1
    assert "refused by the webhook address guard" in delivery.last_error and "loopback" in delivery.last_error
    assert receiver.attempts == 0
    # With the setting on, the same delivery goes through once redelivered.
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
    services.webhook_redeliver(delivery=delivery, user=cast.alice)
    assert services.webhook_deliver(delivery_id=delivery.pk) is None
    assert len(receiver.received) == 1


def test_dns_rebinding_is_caught_at_delivery(cast: Any, receiver: Receiver, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name resolves to a public address when saved, to 127.0.0.1 when delivered."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = iter([PUBLIC_IP, "127.0.0.1"])
    real = socket.getaddrinfo

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(urlguard.socket, "getaddrinfo", rebinding)
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    response = create(cast, f"http://hooks.rebind.test:{port}/hook")
    assert response.status_code == 201, response.content
    delivery = WebhookDelivery.objects.get(pk=_emit_for(cast, response.json()["id"]))
    assert services.webhook_deliver(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and "hooks.rebind.test (127.0.0.1) is a loopback address" in delivery.last_error
    assert receiver.attempts == 0


def _emit_for(cast: Any, endpoint_id: int) -> int:
    services.webhook_emit(project_id=cast.digits.pk, event="run.failed", payload={}, endpoint_ids=[endpoint_id])
    return int(WebhookDelivery.objects.get(endpoint_id=endpoint_id).pk)


@pytest.fixture
def redirector() -> Iterator[str]:
    """A server on 127.0.0.1 that redirects every POST to 127.0.0.2 (nothing listens there)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)  # urllib follows a POST only for 301-303 (as a GET)
            self.send_header("Location", "http://127.0.0.2:9/internal")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_a_redirect_to_an_internal_address_is_refused(redirector: str, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Let the first hop (127.0.0.1, the test's server) through; 127.0.0.2 stands for the internal target.
    real = urlguard.address_refusal
    monkeypatch.setattr(urlguard, "address_refusal", lambda ip: None if ip == "127.0.0.1" else real(ip))
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    request = urllib.request.Request(redirector, data=b"{}", method="POST")
    with pytest.raises(urlguard.BlockedAddress, match="127.0.0.2 is a loopback address"):
        urlguard.guarded_urlopen(request, timeout=5)


def test_guarded_opener_refuses_non_http_schemes(settings: Any) -> None:
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(urlguard.BlockedAddress):
        urlguard.guarded_urlopen(urllib.request.Request("file:///etc/passwd"), timeout=5)


def test_address_classification() -> None:
    assert urlguard.address_refusal(PUBLIC_IP) is None
    assert urlguard.address_refusal("2606:4700:4700::1111") is None
    assert urlguard.address_refusal("127.0.0.5") == "a loopback address"
    assert urlguard.address_refusal("::ffff:10.0.0.1") == "a private address"
    assert urlguard.address_refusal("169.254.169.254") == "a link-local address (cloud metadata lives there)"
    assert urlguard.address_refusal("192.0.2.1") == "a private address"  # documentation range
    assert urlguard.address_refusal("240.0.0.1") is not None
