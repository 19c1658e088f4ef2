"""Outgoing webhooks: manage endpoints, emit events, deliver them signed, retry with backoff.

The one delivery system for every outgoing webhook, project-wide and team-wide. Other apps call
:func:`webhook_emit`; the run lifecycle, node and budget events arrive through
``apps.webhooks.signals`` (receivers on the audit log and on billing's alert notification), so
their services need no import of this app. Each event is delivered at most once per endpoint: a WebhookDelivery row per
(endpoint, event) is claimed with a conditional update before every attempt.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from celery import signature
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import FieldError
from apps.core.queueing import enqueue
from apps.core.signing import webhook_sign
from apps.core.text import is_id
from apps.core.urlguard import BlockedAddress, guarded_urlopen, webhook_url_check
from apps.tenants.models import Project, Team
from apps.webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEndpoint, WebhookEvent

log = logging.getLogger(__name__)

MAX_ENDPOINTS_PER_PROJECT = 20
MIN_SECRET_CHARS = 16
USER_AGENT = "Trainyard-Webhook/1"
SUBSCRIBABLE = [t for t in EventType.values if t != EventType.PING]
# What a team-wide endpoint can receive (project events stay with the project's endpoints).
TEAM_EVENTS = [EventType.BUDGET_THRESHOLD.value]


def _setting(name: str, default: float) -> float:
    """Settings win; the environment is read too so a live stack can shorten retries for tests."""
    return float(getattr(settings, name, os.environ.get(name, default)))


def retry_base_s() -> float:
    return _setting("TRAINYARD_WEBHOOK_RETRY_BASE_S", 10.0)


def max_attempts() -> int:
    return int(_setting("TRAINYARD_WEBHOOK_MAX_ATTEMPTS", 8))


def request_timeout_s() -> float:
    return _setting("TRAINYARD_WEBHOOK_TIMEOUT_S", 10.0)


def retry_delay_s(*, attempts: int) -> float:
    """Exponential backoff after the n-th failed attempt: base, 2x base, 4x base ... capped at an hour."""
    return float(min(3600.0, retry_base_s() * 2 ** max(0, attempts - 1)))


def webhook_verify(*, secret: str, timestamp: str, body: bytes, signature: str, tolerance_s: int = 300,
                   now: float | None = None) -> bool:
    """What a receiver does (documented for users; used by the tests): constant-time compare, recent timestamp."""
    if not is_id(timestamp) or abs((now or time.time()) - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(webhook_sign(secret=secret, timestamp=int(timestamp), body=body), signature)


# --- endpoints ------------------------------------------------------------------------------------

def _clean_url(url: Any) -> str:
    # http(s) only, and no loopback / link-local / private destinations (apps.core.urlguard).
    return webhook_url_check(url, field="url")


def _clean_events(events: Any) -> list[str]:
    if events in (None, ""):
        return []
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise FieldError("events", f"must be a list of event types ({', '.join(SUBSCRIBABLE)}); empty = all")
    unknown = [e for e in events if e not in SUBSCRIBABLE]
    if unknown:
        raise FieldError("events", f"unknown event type {unknown[0]!r} (allowed: {', '.join(SUBSCRIBABLE)})")
    return sorted(set(events))


def _clean_secret(secret: Any) -> str:
    text = str(secret or "")
    if not MIN_SECRET_CHARS <= len(text) <= 128:
        raise FieldError("secret", f"must be {MIN_SECRET_CHARS} to 128 characters (or leave it out to get a generated one)")
    return text


def webhook_endpoint_create(*, project: Project, user: Any, url: Any, events: Any = None, secret: Any = None,
                            description: str = "") -> WebhookEndpoint:
    if WebhookEndpoint.objects.filter(project=project).count() >= MAX_ENDPOINTS_PER_PROJECT:
        raise FieldError("url", f"a project has at most {MAX_ENDPOINTS_PER_PROJECT} webhook endpoints")
    endpoint = WebhookEndpoint.objects.create(
        project=project, url=_clean_url(url), events=_clean_events(events),
        secret=_clean_secret(secret) if secret else "whsec_" + secrets.token_urlsafe(32),
        description=str(description or "")[:200], created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    audit_record(action="webhook.create", target=endpoint, team_id=project.team_id,
                 after={"url": endpoint.url, "events": endpoint.events, "project": project.pk})
    return endpoint


def webhook_team_endpoint_create(*, team: Team, url: Any, secret: Any, events: Any = None,
                                 description: str = "", user: Any = None) -> WebhookEndpoint:
    """A team-wide endpoint: the team's budget alerts (the highest threshold a check crossed, for
    any budget of the team), signed with ``secret``. Configured by an administrator."""
    events = _clean_events(events) or [EventType.BUDGET_THRESHOLD.value]
    unknown = [e for e in events if e not in TEAM_EVENTS]
    if unknown:
        raise FieldError("events", f"a team endpoint receives only {', '.join(TEAM_EVENTS)} (got {unknown[0]!r})")
    if WebhookEndpoint.objects.filter(team=team).count() >= MAX_ENDPOINTS_PER_PROJECT:
        raise FieldError("url", f"a team has at most {MAX_ENDPOINTS_PER_PROJECT} team webhook endpoints")
    endpoint = WebhookEndpoint.objects.create(
        team=team, url=_clean_url(url), events=events, secret=_clean_secret(secret), description=str(description or "")[:200],
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    audit_record(action="webhook.create", target=endpoint, team_id=team.pk, after={"url": endpoint.url, "events": endpoint.events})
    return endpoint


def webhook_endpoint_update(*, endpoint: WebhookEndpoint, **changes: Any) -> WebhookEndpoint:
    before = {"url": endpoint.url, "events": endpoint.events, "active": endpoint.active, "description": endpoint.description}
    if "url" in changes:
        endpoint.url = _clean_url(changes["url"])
    if "events" in changes:
        endpoint.events = _clean_events(changes["events"])
    if "active" in changes:
        endpoint.active = bool(changes["active"])
    if "description" in changes:
        endpoint.description = str(changes["description"] or "")[:200]
    rotated = bool(changes.get("secret"))
    if rotated:
        endpoint.secret = _clean_secret(changes["secret"])
    endpoint.save()
    after = {"url": endpoint.url, "events": endpoint.events, "active": endpoint.active, "description": endpoint.description,
             "secret_rotated": rotated}
    audit_record(action="webhook.update", target=endpoint, team_id=endpoint.owner_team_id, before=before, after=after)
    return endpoint


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    audit_record(action="webhook.delete", target=endpoint, team_id=endpoint.owner_team_id,
                 before={"url": endpoint.url, "events": endpoint.events, "project": endpoint.project_id})
    endpoint.delete()


# --- emitting -------------------------------------------------------------------------------------

# By name: apps.webhooks.tasks imports this module, so this one may not import it back.
DELIVER_TASK = "webhooks.deliver"


def _queue(delivery_id: int, countdown: float = 0) -> None:
    # The webhook sweep re-queues a delivery whose message never made it (Redis down).
    enqueue(signature(DELIVER_TASK), args=[delivery_id], countdown=countdown, queue="default",
            what=f"webhook delivery {delivery_id}")


def webhook_emit(*, event: str, payload: dict[str, Any], project_id: int | None = None, team_id: int | None = None,
                 key: str | None = None, endpoint_ids: list[int] | None = None) -> WebhookEvent | None:
    """Records an event for a project (or, with ``team_id`` instead, for a team's team-wide
    endpoints) and queues one delivery per subscribed, active endpoint.

    Call it inside the transaction that made the change: deliveries are queued only after it
    commits, and vanish with it if it rolls back. ``key`` (default: a fresh id) makes a repeated
    emit of the same happening a no-op; it returns None then.
    """
    if event not in EventType.values:
        raise ValueError(f"unknown webhook event type {event!r}")
    if (project_id is None) == (team_id is None):
        raise ValueError("a webhook event needs a project or a team, not both")
    try:
        with transaction.atomic():
            record = WebhookEvent.objects.create(project_id=project_id, team_id=team_id, type=event,
                                                 key=key or secrets.token_hex(16),
                                                 payload=json.loads(json.dumps(payload, default=str)))
    except IntegrityError:
        return None  # emitted before
    scope = {"project_id": project_id} if project_id is not None else {"team_id": team_id}
    endpoints = WebhookEndpoint.objects.filter(**scope, active=True)
    if endpoint_ids is not None:
        endpoints = endpoints.filter(pk__in=endpoint_ids)
    for endpoint in endpoints.order_by("pk"):
        if event != EventType.PING and not endpoint.wants(event):
            continue
        delivery = WebhookDelivery.objects.create(endpoint=endpoint, event=record)
        transaction.on_commit(partial(_queue, delivery.pk))
    return record


def event_body(*, event: WebhookEvent) -> bytes:
    body: dict[str, Any] = {"id": str(event.id), "type": event.type, "created_at": event.created_at.isoformat()}
    if event.project is not None:
        body["project"] = {"id": event.project.pk, "full_slug": event.project.full_slug}
    elif event.team is not None:
        body["team"] = {"id": event.team.pk, "slug": event.team.slug}
    body["data"] = event.payload
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


# --- delivering -----------------------------------------------------------------------------------

def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str, bool]:
    """(status code or None, error, refused): refused means the guard blocked the destination."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        # URL set by a team admin: the guard re-checks the address actually connected to.
        with guarded_urlopen(request, timeout=timeout) as response:
            return int(response.status), "", False
    except BlockedAddress as err:
        return None, f"refused by the webhook address guard: {err}"[:500], True
    except urllib.error.HTTPError as err:
        return int(err.code), f"HTTP {err.code}", False
    except (urllib.error.URLError, OSError, ValueError) as err:
        return None, str(getattr(err, "reason", err))[:500], False


def _permanent(code: int | None) -> bool:
    """A 4xx other than timeout / rate limit means the receiver refuses this event: do not retry."""
    return code is not None and 400 <= code < 500 and code not in (408, 409, 425, 429)


def webhook_deliver(*, delivery_id: int, now: datetime | None = None, timeout: float | None = None) -> float | None:
    """One attempt at one delivery, if it is due. Returns seconds until the next attempt, or None
    when nothing is left to do (delivered, given up, not due, or another worker holds it)."""
    now = now or timezone.now()
    timeout = request_timeout_s() if timeout is None else timeout
    due = Q(status=DeliveryStatus.PENDING) & (Q(next_retry_at__isnull=True) | Q(next_retry_at__lte=now))
    stale = Q(status=DeliveryStatus.SENDING, lease_until__lt=now)  # a worker died mid-attempt
    claimed = WebhookDelivery.objects.filter(due | stale, pk=delivery_id).update(
        status=DeliveryStatus.SENDING, lease_until=now + timedelta(seconds=timeout + 30), attempts=F("attempts") + 1,
        last_attempt_at=now)
    if not claimed:
        return None
    delivery = WebhookDelivery.objects.select_related("endpoint", "event__project", "event__team").get(pk=delivery_id)
    endpoint, event = delivery.endpoint, delivery.event
    refused = False
    if not endpoint.active:
        code, error = None, "endpoint disabled"
    else:
        body = event_body(event=event)
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json", "User-Agent": USER_AGENT,
            "X-Trainyard-Event": event.type, "X-Trainyard-Delivery": str(event.id),
            "X-Trainyard-Timestamp": str(timestamp),
            "X-Trainyard-Signature": webhook_sign(secret=endpoint.secret, timestamp=timestamp, body=body),
        }
        code, error, refused = _post(endpoint.url, body, headers, timeout)
    done_at = timezone.now()
    fields: dict[str, Any] = {"last_status_code": code, "last_error": error, "lease_until": None}
    retry_in: float | None = None
    if code is not None and 200 <= code < 300:
        fields.update(status=DeliveryStatus.SUCCEEDED, delivered_at=done_at, next_retry_at=None)
    elif not endpoint.active or refused or _permanent(code) or delivery.attempts >= max_attempts():
        # A refused address is not retried: the name points inside the network (maybe on purpose).
        fields.update(status=DeliveryStatus.FAILED, next_retry_at=None)
        log.warning("webhook delivery %s to %s failed for good after %s attempts: %s", delivery.pk, endpoint.url,
                    delivery.attempts, error)
    else:
        retry_in = retry_delay_s(attempts=delivery.attempts)
        fields.update(status=DeliveryStatus.PENDING, next_retry_at=done_at + timedelta(seconds=retry_in))
    WebhookDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.SENDING).update(**fields)
    return retry_in


def webhook_redeliver(*, delivery: WebhookDelivery, user: Any) -> WebhookDelivery:
    """An admin's manual retry of a failed delivery: one more round of attempts."""
    if delivery.status in (DeliveryStatus.PENDING, DeliveryStatus.SENDING):
        return delivery
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.PENDING, next_retry_at=None, attempts=0)
    audit_record(action="webhook.redeliver", target=delivery, team_id=delivery.endpoint.owner_team_id, actor=user,
                 after={"event": str(delivery.event_id)})
    transaction.on_commit(lambda: _queue(delivery.pk))
    delivery.refresh_from_db()
    return delivery


def webhook_due_ids(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Deliveries whose retry is due (or whose worker died): the sweep re-queues them, so a lost
    broker message delays a delivery but never drops it."""
    now = now or timezone.now()
    # A fresh delivery (no retry time) is normally sent at once; the sweep takes it only if its
    # first message seems lost.
    fresh_lost = Q(next_retry_at__isnull=True, created_at__lte=now - timedelta(seconds=60))
    due = (Q(status=DeliveryStatus.PENDING) & (Q(next_retry_at__lte=now) | fresh_lost)) \
        | Q(status=DeliveryStatus.SENDING, lease_until__lt=now)
    return list(WebhookDelivery.objects.filter(due).order_by("pk").values_list("pk", flat=True)[:limit])
