"""Your own notifications: list (newest first, `?unread=1`), the unread count the bell polls, and
marking read. Scoped to the requesting user, never a team: anyone else's notification is a 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import FieldError
from apps.notifications import selectors, services
from apps.notifications.api.serializers import MarkedSerializer, NotificationSerializer, UnreadCountSerializer
from apps.notifications.models import Notification

TRUE, FALSE = {"1", "true", "yes"}, {"0", "false", "no", ""}


def unread_param(value: str | None) -> bool:
    text = (value or "").strip().lower()
    if text not in TRUE | FALSE:
        raise FieldError("unread", f"must be 1 or 0 (got {value!r})")
    return text in TRUE


class NotificationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Notification]):
    serializer_class = NotificationSerializer
    queryset = Notification.objects.none()  # for the schema; the rows come from get_queryset, the user's own

    def get_queryset(self) -> QuerySet[Notification]:
        unread = self.action == "list" and unread_param(self.request.query_params.get("unread"))
        return selectors.notification_list(user=self.request.user, unread=unread)

    @extend_schema(parameters=[OpenApiParameter("unread", OpenApiTypes.STR, enum=["1", "0"], description="1: unread only.")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: NotificationSerializer})
    @action(detail=True, methods=["post"])
    def read(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        notification = services.notification_mark_read(notification=self.get_object())
        return Response(NotificationSerializer(notification).data)

    @extend_schema(request=None, responses={200: MarkedSerializer})
    @action(detail=False, methods=["post"], url_path="read-all")
    def read_all(self, request: Request) -> Response:
        marked = services.notifications_mark_all_read(user=request.user)
        return Response({"marked": marked, "unread": selectors.notification_unread_count(user=request.user)})

    @extend_schema(responses={200: UnreadCountSerializer})
    @action(detail=False, methods=["get"], url_path="unread-count")
    def unread_count(self, request: Request) -> Response:
        """What the bell polls: one indexed count."""
        return Response({"unread": selectors.notification_unread_count(user=request.user)})
