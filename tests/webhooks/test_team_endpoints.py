"""Team-wide endpoints (what billing's team webhooks were): the team's budget alerts, delivered by
the webhooks app like every other event, once per alert; project endpoints never see them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from apps.audit.models import AuditEvent
from apps.billing import tasks
from apps.billing.services import accrual_run, budget_alerts_check, budget_create
from apps.core.errors import FieldError
from apps.webhooks import services
from apps.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEvent
from tests.billing.helpers import make_attempt, make_pool, make_run
from tests.webhooks.receiver import Receiver

SECRET = "s3cret-for-the-vision-team"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.mark.django_db
def test_one_alert_is_one_team_delivery_however_often_it_is_notified(cast: Any, receiver: Receiver,
                                                                     django_capture_on_commit_callbacks: Any) -> None:
    team_hook = services.webhook_team_endpoint_create(team=cast.vision, url=receiver.url, secret=SECRET)
    assert team_hook.events == ["budget.threshold"] and team_hook.project is None
    assert AuditEvent.objects.filter(action="webhook.create", team_id=cast.vision.pk).exists()
    project_hook = services.webhook_endpoint_create(project=cast.digits, user=cast.alice, url=receiver.url,
                                                    events=["run.failed"])
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    budget_create(team=cast.vision, project=cast.digits, amount="1.00", thresholds=[100])
    run = make_run(cast.digits, pool)
    make_attempt(run, started_at=datetime(2026, 11, 2, tzinfo=UTC), ended_at=datetime(2026, 11, 2, 2, tzinfo=UTC), devices=[0])
    now = datetime(2026, 11, 5, tzinfo=UTC)
    accrual_run(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        alert = budget_alerts_check(now=now, notify=tasks._queue_notify)[0]
    with django_capture_on_commit_callbacks(execute=True):
        tasks.alert_notify.apply(args=[alert.pk], throw=True)  # a redelivered message
    assert len(receiver.received) == 1
    body = receiver.received[0].json
    assert body["type"] == "budget.threshold" and body["data"]["alert_id"] == alert.pk and "project" not in body
    assert WebhookEvent.objects.filter(team=cast.vision, project=None).count() == 1
    assert WebhookDelivery.objects.get(endpoint=team_hook).status == DeliveryStatus.SUCCEEDED
    assert not WebhookDelivery.objects.filter(endpoint=project_hook).exists()  # not subscribed to budget alerts


@pytest.mark.django_db
def test_team_endpoints_take_only_budget_alerts_and_a_long_secret(cast: Any) -> None:
    with pytest.raises(FieldError) as err:
        services.webhook_team_endpoint_create(team=cast.vision, url="https://example.com/h", secret=SECRET,
                                              events=["run.failed"])
    assert list(err.value.fields) == ["events"]
    with pytest.raises(FieldError) as err:
        services.webhook_team_endpoint_create(team=cast.vision, url="https://example.com/h", secret="short")
    assert list(err.value.fields) == ["secret"]
    with pytest.raises(ValueError, match="a project or a team"):
        services.webhook_emit(project_id=cast.digits.pk, team_id=cast.vision.pk, event="ping", payload={})
