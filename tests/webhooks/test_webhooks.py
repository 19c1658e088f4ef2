"""Outgoing webhooks in-process: endpoint management by role, signed delivery to a real local HTTP
server exactly once per event, retries with backoff, and the delivery log (API and page)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client as PageClient

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record
from apps.billing.models import Budget
from apps.runs.models import Run
from apps.webhooks import services, signals
from apps.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from tests.runs.factories import body, local_pool, make_template
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def endpoint(cast: Any, url: str, **extra: Any) -> dict[str, Any]:
    response = cast.client(cast.alice).post("/api/v1/webhooks/", {"project": "vision/digits", "url": url, **extra}, format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def submit(cast: Any) -> int:
    local_pool()
    make_template()
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast), format="json")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def test_endpoints_are_managed_by_team_admins_only(cast: Any) -> None:
    created = endpoint(cast, "https://example.com/hook", events=["run.failed"], description="ci")
    assert created["secret"].startswith("whsec_") and created["events"] == ["run.failed"]
    hook_id = created["id"]

    listed = cast.client(cast.victor).get("/api/v1/webhooks/").json()["results"]
    assert [h["id"] for h in listed] == [hook_id] and "secret" not in listed[0]
    assert cast.client(cast.victor).post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://x.test/"},
                                         format="json").status_code == 403
    assert cast.client(cast.victor).patch(f"/api/v1/webhooks/{hook_id}/", {"active": False}, format="json").status_code == 403

    bob = cast.client(cast.bob)
    assert bob.get(f"/api/v1/webhooks/{hook_id}/").status_code == 404
    assert bob.delete(f"/api/v1/webhooks/{hook_id}/").status_code == 404
    stolen = bob.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://x.test/"}, format="json")
    assert stolen.status_code == 400 and "project" in stolen.json()["error"]["fields"]

    alice = cast.client(cast.alice)
    bad_url = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "ftp://x"}, format="json")
    assert bad_url.status_code == 400 and "url" in bad_url.json()["error"]["fields"]
    bad_event = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://x.test/", "events": ["run.exploded"]},
                           format="json")
    assert bad_event.status_code == 400 and any(k.startswith("events") for k in bad_event.json()["error"]["fields"])
    short = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://x.test/", "secret": "short"}, format="json")
    assert short.status_code == 400 and "secret" in short.json()["error"]["fields"]

    assert alice.patch(f"/api/v1/webhooks/{hook_id}/", {"active": False}, format="json").json()["active"] is False
    assert alice.delete(f"/api/v1/webhooks/{hook_id}/").status_code == 204
    actions = set(AuditEvent.objects.filter(object_type="webhooks.webhookendpoint").values_list("action", flat=True))
    assert actions == {"webhook.create", "webhook.update", "webhook.delete"}


def test_run_event_is_delivered_once_with_a_valid_signature(cast: Any, receiver: Receiver,
                                                            django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    hook = endpoint(cast, receiver.url)
    endpoint(cast, receiver.url + "/failed-only", events=["run.failed"])
    run_id = submit(cast)
    with django_capture_on_commit_callbacks(execute=True):
        assert cast.client(cast.alice).post(f"/api/v1/runs/{run_id}/cancel/").status_code == 200

    assert len(receiver.received) == 1  # the run.failed-only endpoint got nothing
    got = receiver.received[0]
    assert services.webhook_verify(secret=hook["secret"], timestamp=got.headers["x-trainyard-timestamp"], body=got.body,
                                   signature=got.headers["x-trainyard-signature"])
    assert got.headers["x-trainyard-signature"].startswith("sha256=")
    assert not services.webhook_verify(secret="whsec_wrong-secret-123", timestamp=got.headers["x-trainyard-timestamp"],
                                       body=got.body, signature=got.headers["x-trainyard-signature"])
    assert got.json["type"] == "run.cancelled" and got.json["data"]["run"]["id"] == run_id
    assert got.json["project"]["full_slug"] == "vision/digits"
    assert got.headers["x-trainyard-event"] == "run.cancelled" and got.headers["x-trainyard-delivery"] == got.json["id"]

    # The same audited change seen again, and a duplicate task message: still one delivery, one POST.
    audit = AuditEvent.objects.get(action="run.cancelled", object_id=str(run_id))
    with django_capture_on_commit_callbacks(execute=True):
        signals.on_audit_event(AuditEvent, audit, created=True)
    delivery = WebhookDelivery.objects.get()
    assert services.webhook_deliver(delivery_id=delivery.pk) is None
    assert len(receiver.received) == 1 and delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempts == 1


def test_failing_receiver_is_retried_with_backoff_and_logged(cast: Any, django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    flaky = Receiver(fail_first=2)
    try:
        endpoint(cast, flaky.url, events=["run.failed"])
        with django_capture_on_commit_callbacks(execute=True):
            services.webhook_emit(project_id=cast.digits.pk, event="run.failed", payload={"run": {"id": 1}}, key="test:1")
        delivery = WebhookDelivery.objects.get()
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.PENDING, 1, 500)
        assert delivery.next_retry_at is not None and delivery.last_attempt_at is not None
        first_gap = delivery.next_retry_at - delivery.last_attempt_at
        # Not due yet: nothing is sent early.
        assert services.webhook_deliver(delivery_id=delivery.pk, now=delivery.last_attempt_at) is None
        assert flaky.attempts == 1

        second = services.webhook_deliver(delivery_id=delivery.pk, now=delivery.next_retry_at + timedelta(seconds=1))
        delivery.refresh_from_db()
        assert second is not None and delivery.attempts == 2 and delivery.status == DeliveryStatus.PENDING
        assert second == pytest.approx(2 * first_gap.total_seconds(), rel=0.05)  # exponential
        assert delivery.next_retry_at is not None
        assert services.webhook_deliver(delivery_id=delivery.pk, now=delivery.next_retry_at + timedelta(seconds=1)) is None
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.SUCCEEDED, 3, 204)
        assert flaky.attempts == 3 and len(flaky.received) == 1
    finally:
        flaky.close()

    log = cast.client(cast.alice).get("/api/v1/webhook-deliveries/", {"project": "vision/digits"}).json()["results"]
    assert [(d["status"], d["attempts"], d["last_status_code"]) for d in log] == [("succeeded", 3, 204)]
    assert cast.client(cast.bob).get("/api/v1/webhook-deliveries/").json()["results"] == []

    page = PageClient()
    page.force_login(cast.alice)
    html = page.get(f"/projects/{cast.digits.pk}/webhooks/").content.decode()
    assert 'data-status="succeeded" data-attempts="3"' in html and "HTTP 204" in html
    # Its times are <time class="when">, written in the viewer's zone as on every page (issue 29).
    assert html.count('<time class="when" datetime=') >= 3
    other = PageClient()
    other.force_login(cast.bob)
    assert other.get(f"/projects/{cast.digits.pk}/webhooks/").status_code == 404


def test_unreachable_receiver_is_retried_and_unknown_events_refused(
        cast: Any, django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    endpoint(cast, "http://127.0.0.1:9/unreachable")  # connection refused: retried
    with django_capture_on_commit_callbacks(execute=True):
        services.webhook_emit(project_id=cast.digits.pk, event="node.lost", payload={}, key="test:2")
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.last_status_code is None and delivery.last_error
    with pytest.raises(ValueError):
        services.webhook_emit(project_id=cast.digits.pk, event="run.exploded", payload={})


def test_preempted_and_budget_events_come_from_the_audit_log(cast: Any, receiver: Receiver,
                                                            django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    endpoint(cast, receiver.url, events=["run.preempted", "budget.threshold"])
    run = Run.objects.get(pk=submit(cast))
    budget = Budget.objects.create(team=cast.vision, project=cast.digits, amount=100)
    with django_capture_on_commit_callbacks(execute=True):
        Run.objects.filter(pk=run.pk).update(reason_code="preempted")
        audit_record(action="run.requeued", target=run, team_id=cast.vision.pk)
        audit_record(action="run.requeued", target=Run.objects.get(pk=submit(cast)), team_id=cast.vision.pk)  # not preempted
        audit_record(action="budget.alert", target=budget, team_id=cast.vision.pk,
                     after={"period": "2026-01", "threshold": 80, "spent": "80.00"})
    types = [r.json["type"] for r in receiver.received]
    assert sorted(types) == ["budget.threshold", "run.preempted"]
    alert = next(r.json for r in receiver.received if r.json["type"] == "budget.threshold")
    assert alert["data"]["threshold"] == 80 and alert["data"]["budget"]["id"] == budget.pk


def test_project_page_links_the_webhook_log_and_the_secrets_page(cast: Any) -> None:
    # The delivery log had no link anywhere: only a typed URL reached it.
    endpoint(cast, "https://example.com/hook")
    endpoint(cast, "https://example.com/other")
    WebhookEndpoint.objects.filter(url="https://example.com/other").update(active=False)
    for user, secrets_link in ((cast.alice, "Manage secrets"), (cast.victor, "See secrets")):
        browser = PageClient()
        browser.force_login(user)
        html = browser.get(f"/projects/{cast.digits.pk}/").content.decode()
        assert f'<a href="/projects/{cast.digits.pk}/webhooks/">Endpoints and delivery log</a>' in html
        assert "2 endpoints (1 disabled)" in html
        assert f'<a href="/projects/{cast.digits.pk}/secrets/">{secrets_link}</a>' in html
        assert browser.get(f"/projects/{cast.digits.pk}/webhooks/").status_code == 200
    bob = PageClient()
    bob.force_login(cast.bob)
    other = bob.get(f"/projects/{cast.tinylm.pk}/").content.decode()
    assert "No endpoints yet." in other and f"/projects/{cast.digits.pk}/webhooks/" not in other
    assert bob.get(f"/projects/{cast.digits.pk}/webhooks/").status_code == 404
