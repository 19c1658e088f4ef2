"""Writes: telling users of a happening (once each), and marking what they have read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from apps.notifications.models import Notification


@dataclass(frozen=True)
class Message:
    """What one happening says; `key` names the happening, so telling it again adds nothing."""

    kind: str
    title: str
    key: str
    body: str = ""
    url: str = ""
    team_id: int | None = None


def notifications_create(*, user_ids: Iterable[int], message: Message) -> int:
    """One notification per user for the happening; users already told are skipped (the unique
    user+key, so a receiver run twice or two workers racing add nothing). Returns how many are new."""
    ids = sorted(set(user_ids))
    if not ids:
        return 0
    already = set(Notification.objects.filter(user_id__in=ids, key=message.key).values_list("user_id", flat=True))
    rows = [Notification(user_id=pk, team_id=message.team_id, kind=message.kind, title=message.title[:200],
                         body=message.body[:2000], url=message.url[:500], key=message.key[:120])
            for pk in ids if pk not in already]
    Notification.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def notification_mark_read(*, notification: Notification) -> Notification:
    if notification.read_at is None:
        Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(read_at=timezone.now())
        notification.refresh_from_db(fields=["read_at"])
    return notification


def notifications_mark_all_read(*, user: Any) -> int:
    """Every unread notification of the user read now; returns how many."""
    return Notification.objects.filter(user_id=user.pk, read_at__isnull=True).update(read_at=timezone.now())
