"""Reads: a user's own notifications (never anyone else's), and who hears of what."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from apps.notifications.models import Notification
from apps.tenants.models import Membership, Role
from apps.tenants.selectors import FINANCE_GROUP

BELL_SIZE = 20


def notification_list(*, user: Any, unread: bool = False) -> QuerySet[Notification]:
    """The user's own notifications, newest first; the only queryset views build on."""
    if not user.is_authenticated:
        return Notification.objects.none()
    notifications = Notification.objects.filter(user_id=user.pk)
    if unread:
        notifications = notifications.filter(read_at__isnull=True)
    return notifications.order_by("-created_at", "-id")


def notification_unread_count(*, user: Any) -> int:
    """One count on the partial index of unread rows: what the bell polls."""
    if not user.is_authenticated:
        return 0
    return Notification.objects.filter(user_id=user.pk, read_at__isnull=True).count()


def team_user_ids(*, team_id: int, among: Iterable[int | None] | None = None) -> list[int]:
    """Active members of the team; with `among`, those of these users who may still see the team
    (members, superusers): a submitter who has since left it hears no more of it."""
    User = get_user_model()
    members = Q(pk__in=Membership.objects.filter(team_id=team_id).values("user_id"))
    users = User.objects.filter(is_active=True)
    if among is None:
        users = users.filter(members)
    else:
        users = users.filter(members | Q(is_superuser=True)).filter(pk__in=[pk for pk in among if pk is not None])
    return sorted(users.values_list("pk", flat=True))


def budget_alert_user_ids(*, team_id: int) -> list[int]:
    """The people billing e-mails an alert to (billing.services.alert_recipients): the team's
    admins and finance, whose role spans teams."""
    User = get_user_model()
    admins = Membership.objects.filter(team_id=team_id, role=Role.ADMIN).values("user_id")
    users = User.objects.filter(is_active=True).filter(Q(pk__in=admins) | Q(groups__name=FINANCE_GROUP))
    return sorted(set(users.values_list("pk", flat=True)))
