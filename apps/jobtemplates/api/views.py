from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.listing import LIST_BACKENDS
from apps.core.errors import FieldError
from apps.core.text import is_id
from apps.jobtemplates.api.serializers import ApprovedImageSerializer, JobTemplateSerializer
from apps.jobtemplates.selectors import image_list, template_get, template_list
from apps.tenants.api.scoped import UnscopedAPIMixin


class JobTemplateViewSet(UnscopedAPIMixin, viewsets.GenericViewSet):
    """Paved-road templates (no tenant owns them): the latest published version of each."""

    serializer_class = JobTemplateSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"
    filter_backends = LIST_BACKENDS
    ordering_fields = ["slug", "title", "kind", "published_at", "created_at"]
    ordering = ["slug"]

    @extend_schema(responses={200: JobTemplateSerializer(many=True)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(template_list(user=request.user)))
        return self.get_paginated_response(JobTemplateSerializer(page, many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("version", OpenApiTypes.INT, description="A specific version (default: latest published).")],
        responses={200: JobTemplateSerializer},
    )
    def retrieve(self, request: Request, slug: str, *args: Any, **kwargs: Any) -> Response:
        raw = request.query_params.get("version")
        version = None
        if raw:
            if not is_id(raw):
                raise FieldError("version", f"must be a positive integer (got {raw!r})")
            version = int(raw)
        return Response(JobTemplateSerializer(template_get(user=request.user, slug=slug, version=version)).data)


class ApprovedImageViewSet(UnscopedAPIMixin, viewsets.GenericViewSet):
    """The approved container images (admins manage them in the admin): a run uses its template's."""

    serializer_class = ApprovedImageSerializer
    filter_backends = LIST_BACKENDS
    ordering_fields = ["name", "created_at"]
    ordering = ["name"]

    @extend_schema(responses={200: ApprovedImageSerializer(many=True)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(image_list()))
        return self.get_paginated_response(ApprovedImageSerializer(page, many=True).data)
