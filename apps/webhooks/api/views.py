"""Webhook endpoints of your teams' projects (team admins manage them) and their delivery log."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.listing import LIST_BACKENDS, POLLING_LIST_BACKENDS
from apps.core.errors import FieldError, Forbidden
from apps.core.text import is_id
from apps.tenants.api.scoped import ScopedModelViewSet, ScopedReadOnlyViewSet
from apps.tenants.selectors import has_role, project_by_ref_or_error
from apps.webhooks import services
from apps.webhooks.api.serializers import (
    WebhookDeliverySerializer,
    WebhookEndpointCreatedSerializer,
    WebhookEndpointSerializer,
    WebhookEndpointWriteSerializer,
)
from apps.webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEndpoint


class WebhookEndpointViewSet(ScopedModelViewSet):
    """Where a project's events are POSTed. Members read; team admins create, change, delete."""

    team_path = "project__team"
    write_role = "admin"
    serializer_class = WebhookEndpointSerializer
    queryset = WebhookEndpoint.objects.select_related("project__team").order_by("pk")
    filter_backends = POLLING_LIST_BACKENDS
    ordering_fields = ["created_at", "updated_at", "url", "id"]
    ordering = ["id"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.request.query_params.get("project"):
            queryset = queryset.filter(project=project_by_ref_or_error(user=self.request.user, ref=self.request.query_params["project"]))
        return super().filter_queryset(queryset)  # ?ordering=, ?updated_after=

    @extend_schema(parameters=[OpenApiParameter("project", OpenApiTypes.STR, description="Project id or 'team/project'.")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=WebhookEndpointWriteSerializer, responses={201: WebhookEndpointCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = WebhookEndpointWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "project" not in data:
            raise FieldError("project", "required")
        if "url" not in data:
            raise FieldError("url", "required")
        project = project_by_ref_or_error(user=request.user, ref=data["project"])
        if not has_role(user=request.user, team_id=project.team_id, at_least="admin"):
            raise Forbidden("Only team admins may manage webhooks.")
        endpoint = services.webhook_endpoint_create(project=project, user=request.user, url=data["url"],
                                                    events=data.get("events"), secret=data.get("secret"),
                                                    description=data.get("description", ""))
        return Response(WebhookEndpointCreatedSerializer(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookEndpointWriteSerializer, responses={200: WebhookEndpointSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        endpoint = self.get_object()
        body = WebhookEndpointWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        changes = {k: v for k, v in body.validated_data.items() if k != "project"}
        return Response(WebhookEndpointSerializer(services.webhook_endpoint_update(endpoint=endpoint, **changes)).data)

    @extend_schema(exclude=True)
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.partial_update(request, *args, **kwargs)

    def perform_destroy(self, instance: WebhookEndpoint) -> None:
        services.webhook_endpoint_delete(endpoint=instance)

    @extend_schema(request=None, responses={202: WebhookDeliverySerializer})
    @action(detail=True, methods=["post"])
    def ping(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Send a signed test event to this endpoint only; watch it in the delivery log."""
        endpoint = self.get_object()
        if not has_role(user=request.user, team_id=endpoint.project.team_id, at_least="admin"):
            raise Forbidden("Only team admins may manage webhooks.")
        event = services.webhook_emit(project_id=endpoint.project_id, event=EventType.PING, endpoint_ids=[endpoint.pk],
                                      payload={"endpoint": endpoint.pk, "by": request.user.get_username()})
        delivery = WebhookDelivery.objects.select_related("endpoint", "event").get(endpoint=endpoint, event=event)
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


class WebhookDeliveryViewSet(ScopedReadOnlyViewSet):
    """The delivery log: one row per event and endpoint, with attempts and the last answer."""

    team_path = "endpoint__project__team"
    serializer_class = WebhookDeliverySerializer
    queryset = WebhookDelivery.objects.select_related("endpoint__project__team", "event").order_by("-created_at", "-pk")
    filter_backends = LIST_BACKENDS
    ordering_fields = ["created_at", "last_attempt_at", "status", "attempts", "id"]
    ordering = ["-created_at", "-id"]

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        params = self.request.query_params
        if params.get("project"):
            queryset = queryset.filter(endpoint__project=project_by_ref_or_error(user=self.request.user, ref=params["project"]))
        if params.get("status"):
            if params["status"] not in DeliveryStatus.values:
                raise FieldError("status", f"one of {', '.join(DeliveryStatus.values)}")
            queryset = queryset.filter(status=params["status"])
        if params.get("endpoint"):
            if not is_id(params["endpoint"]):
                raise FieldError("endpoint", "must be an endpoint id")
            queryset = queryset.filter(endpoint_id=int(params["endpoint"]))
        if params.get("event_type"):
            queryset = queryset.filter(event__type=params["event_type"])
        return super().filter_queryset(queryset)  # ?ordering=

    @extend_schema(parameters=[
        OpenApiParameter("project", OpenApiTypes.STR, description="Project id or 'team/project'."),
        OpenApiParameter("status", OpenApiTypes.STR, enum=DeliveryStatus.values),
        OpenApiParameter("endpoint", OpenApiTypes.INT),
        OpenApiParameter("event_type", OpenApiTypes.STR, enum=EventType.values),
    ])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: WebhookDeliverySerializer})
    @action(detail=True, methods=["post"])
    def redeliver(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Try a failed or delivered event again (team admins)."""
        delivery = self.get_object()
        if not has_role(user=request.user, team_id=delivery.endpoint.project.team_id, at_least="admin"):
            raise Forbidden("Only team admins may manage webhooks.")
        return Response(WebhookDeliverySerializer(services.webhook_redeliver(delivery=delivery, user=request.user)).data)
