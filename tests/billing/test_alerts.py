"""Budget alerts: each threshold once per period, by e-mail and a signed webhook received by a
real HTTP server (the team's team-wide endpoint, delivered by the webhooks app); re-running
sends nothing new; a new period re-arms them."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail

from apps.audit.models import AuditEvent
from apps.billing import tasks
from apps.billing.models import BudgetAlert, UsageEntry
from apps.billing.services import accrual_run, budget_alerts_check, budget_create
from apps.core.errors import FieldError
from apps.webhooks import services as webhooks
from apps.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from tests.billing.helpers import make_attempt, make_pool, make_run

SECRET = "s3cret-for-the-vision-team"


class Receiver(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"headers": dict(self.headers), "body": body})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", Receiver.received
    finally:
        server.shutdown()
        server.server_close()


def _spend(cast: Any, pool: Any, start: datetime, hours: float, devices: int = 1) -> None:
    run = make_run(cast.digits, pool)
    make_attempt(run, started_at=start, ended_at=start + timedelta(hours=hours), devices=list(range(devices)))


def test_thresholds_fire_once_per_period(cast: Any, receiver: Any, django_capture_on_commit_callbacks: Any) -> None:
    url, received = receiver
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    budget = budget_create(team=cast.vision, project=cast.digits, amount="10.00")
    webhooks.webhook_team_endpoint_create(team=cast.vision, url=url, secret=SECRET)
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)

    _spend(cast, pool, datetime(2026, 11, 2, tzinfo=UTC), 6)  # $6.00: 50% crossed
    accrual_run(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        fired = budget_alerts_check(now=now, notify=tasks._queue_notify)
    assert [a.threshold for a in fired] == [50]
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert "reached 50%" in message.subject and "vision/digits November 2026" in message.subject
    assert "alice@example.com" in message.to and "carol@example.com" in message.to  # team admin + finance
    assert "bob@example.com" not in message.to and "victor@example.com" not in message.to
    assert "$6.00 of $10.00" in message.body

    _spend(cast, pool, datetime(2026, 11, 3, tzinfo=UTC), 4.5)  # $10.50: 80% and 100% crossed
    accrual_run(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        fired = budget_alerts_check(now=now, notify=tasks._queue_notify)
    assert [a.threshold for a in fired] == [80, 100]
    # Two thresholds crossed at once: one message, naming the highest (issue 29).
    assert len(mail.outbox) == 2 and "reached 100%" in mail.outbox[1].subject

    # Re-running (accrual and alerts, via the real tasks' code path) sends nothing new.
    with django_capture_on_commit_callbacks(execute=True):
        assert accrual_run(now=now) == 0
        assert budget_alerts_check(now=now, notify=tasks._queue_notify) == []
    assert len(mail.outbox) == 2
    assert BudgetAlert.objects.filter(budget=budget).count() == 3
    assert AuditEvent.objects.filter(action="budget.alert").count() == 3

    # Webhooks: one per message, each signed over "<timestamp>.<body>" with the team's secret.
    assert len(received) == 2
    thresholds = []
    for hit in received:
        timestamp = hit["headers"]["X-Trainyard-Timestamp"]
        expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + hit["body"], hashlib.sha256).hexdigest()
        assert hmac.compare_digest(hit["headers"]["X-Trainyard-Signature"], f"sha256={expected}")
        assert hit["headers"]["X-Trainyard-Event"] == "budget.threshold"
        body = json.loads(hit["body"])
        assert body["type"] == "budget.threshold" and body["team"] == {"id": cast.vision.pk, "slug": "vision"}
        payload = body["data"]
        assert payload["project"] == "vision/digits" and payload["period"] == "2026-11" and payload["team"] == "vision"
        thresholds.append(payload["threshold"])
    assert thresholds == [50, 100]
    # In the one delivery log, as delivered.
    assert WebhookDelivery.objects.filter(endpoint__team=cast.vision, status=DeliveryStatus.SUCCEEDED).count() == 2

    # December: a new period, nothing spent yet: nothing fires; spend again and 50% fires anew.
    december = datetime(2026, 12, 10, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_check(now=december, notify=tasks._queue_notify) == []
    _spend(cast, pool, datetime(2026, 12, 1, tzinfo=UTC), 5)
    accrual_run(now=december)
    with django_capture_on_commit_callbacks(execute=True):
        fired = budget_alerts_check(now=december, notify=tasks._queue_notify)
    assert [(a.period, a.threshold) for a in fired] == [("2026-12", 50)]
    assert len(mail.outbox) == 3 and len(received) == 3


def test_spend_straddling_month_end_is_split(cast: Any) -> None:
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    _spend(cast, pool, datetime(2026, 10, 31, 22, tzinfo=UTC), 4)  # 2 h in October, 2 h in November
    accrual_run(now=datetime(2026, 11, 2, tzinfo=UTC))
    octo = sum(e.cost for e in UsageEntry.objects.filter(period_start__lt=datetime(2026, 11, 1, tzinfo=UTC)))
    nov = sum(e.cost for e in UsageEntry.objects.filter(period_start__gte=datetime(2026, 11, 1, tzinfo=UTC)))
    assert (octo, nov) == (2, 2)


def test_webhook_retries_on_server_error(cast: Any, django_capture_on_commit_callbacks: Any) -> None:
    """A receiver that fails once gets the delivery again (the webhooks app's retry with backoff)."""
    calls: list[int] = []

    class Flaky(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(1)
            self.send_response(503 if len(calls) == 1 else 200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
        budget_create(team=cast.vision, project=cast.digits, amount="1.00", thresholds=[100])
        webhooks.webhook_team_endpoint_create(team=cast.vision, url=f"http://127.0.0.1:{server.server_address[1]}/", secret=SECRET)
        _spend(cast, pool, datetime(2026, 11, 2, tzinfo=UTC), 2)
        now = datetime(2026, 11, 5, tzinfo=UTC)
        accrual_run(now=now)
        with django_capture_on_commit_callbacks(execute=True):
            budget_alerts_check(now=now, notify=tasks._queue_notify)
        # The 503 leaves the delivery pending with a retry time (backoff) instead of dropping it...
        assert len(calls) == 1
        delivery = WebhookDelivery.objects.get(endpoint__team=cast.vision)
        assert delivery.status == DeliveryStatus.PENDING and delivery.last_status_code == 503
        assert delivery.next_retry_at is not None
        # ... and the retried delivery gets through.
        assert webhooks.webhook_deliver(delivery_id=delivery.pk, now=delivery.next_retry_at) is None
        assert len(calls) == 2
        delivery.refresh_from_db()
        assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempts == 2
    finally:
        server.shutdown()
        server.server_close()


def test_team_webhooks_get_the_address_guard(cast: Any, receiver: Any, settings: Any, django_capture_on_commit_callbacks: Any) -> None:
    """Team webhooks pass the same SSRF guard as project webhooks: refused when saved, and again
    at delivery for a URL that was saved while private addresses were allowed."""
    url, received = receiver
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    for bad in ("http://169.254.169.254/latest/meta-data/", "http://10.0.0.5/hook", "ftp://example.com/x", url):
        with pytest.raises(FieldError) as err:
            webhooks.webhook_team_endpoint_create(team=cast.vision, url=bad, secret=SECRET)
        assert list(err.value.fields) == ["url"]
    assert not WebhookEndpoint.objects.filter(team=cast.vision).exists()

    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
    webhooks.webhook_team_endpoint_create(team=cast.vision, url=url, secret=SECRET)
    settings.TRAINYARD_WEBHOOK_ALLOW_PRIVATE = False
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    budget_create(team=cast.vision, project=cast.digits, amount="1.00", thresholds=[100])
    _spend(cast, pool, datetime(2026, 11, 2, tzinfo=UTC), 2)
    now = datetime(2026, 11, 5, tzinfo=UTC)
    accrual_run(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        budget_alerts_check(now=now, notify=tasks._queue_notify)
    # Refused at the connection, not retried, and nothing reached the receiver on 127.0.0.1.
    delivery = WebhookDelivery.objects.get(endpoint__team=cast.vision)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1 and "address guard" in delivery.last_error
    assert received == []
