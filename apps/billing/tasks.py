"""Celery tasks for accounting: accrual (on the beat), budget alerts, their notifications.

Each takes ids, is idempotent (the ledger and BudgetAlert's unique keys make a re-run add
nothing), and is queued after commit.
"""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from apps.audit.context import acting_as
from apps.billing import services
from apps.runs.services.lifecycle import run_cancel

QUEUE = "default"


def _queue_notify(alert_id: int) -> None:
    alert_notify.apply_async(args=[alert_id], queue=QUEUE)


def _queue_stop(budget_id: int) -> None:
    budget_stop_running.apply_async(args=[budget_id], queue=QUEUE)


@shared_task(name="billing.accrue", ignore_result=True)
def accrue() -> int:
    """Accrue every running attempt up to now, close ended ones, then check budget alerts."""
    with acting_as(label="task:billing.accrue"):
        services.pool_prices_in_force()
        added = services.accrual_run()
        with transaction.atomic():
            services.budget_alerts_check(notify=_queue_notify, stop_running=_queue_stop)
    return added


@shared_task(name="billing.alerts", ignore_result=True)
def alerts() -> int:
    with acting_as(label="task:billing.alerts"), transaction.atomic():
        return len(services.budget_alerts_check(notify=_queue_notify, stop_running=_queue_stop))


@shared_task(name="billing.alert_notify", ignore_result=True)
def alert_notify(alert_id: int) -> None:
    """The alert's e-mail, then its team webhooks (delivered, signed and retried by the webhooks app)."""
    services.alert_email(alert_id=alert_id)
    services.alert_announce(alert_id=alert_id)


@shared_task(name="billing.budget_stop_running", ignore_result=True)
def budget_stop_running(budget_id: int) -> list[int]:
    with acting_as(label="task:billing.budget_stop_running"):
        return services.budget_stop_running(budget_id=budget_id, cancel=run_cancel)
