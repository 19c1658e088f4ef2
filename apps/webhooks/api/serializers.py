from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.webhooks.models import WebhookDelivery, WebhookEndpoint
from apps.webhooks.services import SUBSCRIBABLE


class WebhookEndpointSerializer(serializers.ModelSerializer[WebhookEndpoint]):
    project = serializers.IntegerField(source="project_id", read_only=True)
    project_slug = serializers.CharField(source="project.full_slug", read_only=True)
    secret_hint = serializers.SerializerMethodField(help_text="The secret's first characters; the whole secret is shown once, "
                                                    "when the endpoint is created.")

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "project", "project_slug", "url", "events", "description", "active", "secret_hint", "created_at",
                  "updated_at"]
        read_only_fields = fields

    def get_secret_hint(self, endpoint: WebhookEndpoint) -> str:
        return endpoint.secret[:10] + "…"


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(read_only=True, help_text="Verify X-Trainyard-Signature with it; shown only now.")

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookEndpointWriteSerializer(serializers.Serializer[Any]):
    """Shape only; the service checks content and names the bad field."""

    project = serializers.CharField(required=False, help_text="Project id or 'team/project' (create only).")
    url = serializers.CharField(required=False, max_length=500, help_text="http(s) URL that receives POSTs.")
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE), required=False, max_length=len(SUBSCRIBABLE),
                                   help_text="Event types to receive; empty = all.")
    secret = serializers.CharField(required=False, min_length=16, max_length=128, help_text="Signing secret (default: generated).")
    description = serializers.CharField(required=False, allow_blank=True, max_length=200)
    active = serializers.BooleanField(required=False)


class WebhookDeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    event_id = serializers.UUIDField(source="event.id", read_only=True)
    event_type = serializers.CharField(source="event.type", read_only=True)
    project = serializers.IntegerField(source="endpoint.project_id", read_only=True)
    url = serializers.CharField(source="endpoint.url", read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = ["id", "endpoint", "project", "url", "event_id", "event_type", "status", "attempts", "last_status_code",
                  "last_error", "last_attempt_at", "next_retry_at", "delivered_at", "created_at"]
        read_only_fields = fields
