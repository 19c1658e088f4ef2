from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.notifications.models import Notification


class NotificationSerializer(serializers.ModelSerializer[Notification]):
    unread = serializers.BooleanField(read_only=True)

    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "created_at", "read_at", "unread"]
        read_only_fields = fields


class UnreadCountSerializer(serializers.Serializer[Any]):
    unread = serializers.IntegerField()


class MarkedSerializer(serializers.Serializer[Any]):
    marked = serializers.IntegerField()
    unread = serializers.IntegerField()
