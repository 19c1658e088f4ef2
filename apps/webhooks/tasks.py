"""Celery tasks for webhook delivery. Both take ids and are idempotent: the delivery row's
conditional claim makes a duplicate message a no-op."""

from __future__ import annotations

from celery import shared_task

from apps.webhooks import services

QUEUE = "default"


@shared_task(name=services.DELIVER_TASK, ignore_result=True)
def deliver(delivery_id: int) -> None:
    retry_in = services.webhook_deliver(delivery_id=delivery_id)
    if retry_in is not None:
        # A countdown message, not Celery's retry(): the row already says when the next attempt is
        # due, and the sweep re-queues it should this message be lost.
        deliver.apply_async(args=[delivery_id], countdown=retry_in, queue=QUEUE)


@shared_task(name="webhooks.sweep", ignore_result=True)
def sweep() -> int:
    ids = services.webhook_due_ids()
    for delivery_id in ids:
        deliver.apply_async(args=[delivery_id], queue=QUEUE)
    return len(ids)
