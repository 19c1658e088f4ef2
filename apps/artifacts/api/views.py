"""Run artifacts over the API: list, upload (multipart) and download. The run is looked up in
the user's teams only, so another tenant's run (and its files) is a 404."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response

from apps.artifacts.api.serializers import ArtifactPageSerializer, ArtifactSerializer, ArtifactUploadSerializer
from apps.artifacts.models import Artifact
from apps.artifacts.selectors import (
    artifact_download_url,
    artifact_get,
    artifact_list,
    artifact_open,
    artifact_served_inline,
)
from apps.artifacts.services import artifact_content_type, artifact_store, artifact_write_check
from apps.core.api.parsers import FormParser, MultiPartParser
from apps.core.errors import FieldError
from apps.core.storage import ObjectMissing
from apps.core.storage_views import store_redirect
from apps.runs.models import Run
from apps.tenants.api.scoped import ScopedMixin

# Served files never run as pages of this site: no scripts (an SVG's included), no plugins.
DOWNLOAD_CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"


class _RunScoped(ScopedMixin, generics.GenericAPIView):
    queryset = Run.objects.select_related("project__team")
    team_path = "project__team"


class RunArtifactsView(_RunScoped):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        operation_id="runs_artifacts_list",
        parameters=[OpenApiParameter("prefix", str, description="Only names starting with this (a folder: 'plots/')."),
                    OpenApiParameter("page", int, description="A page number within the paginated result set."),
                    OpenApiParameter("page_size", int, description="Number of results to return per page (at most 500).")],
        responses={200: ArtifactPageSerializer},
        description="The run's artifacts ordered by name, a page at a time.",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        page = self.paginate_queryset(artifact_list(run=run, prefix=request.query_params.get("prefix", "")))
        assert page is not None  # the project's pagination is always on
        return self.get_paginated_response(ArtifactSerializer(page, many=True, context={"request": request}).data)

    @extend_schema(operation_id="runs_artifacts_create",
                   request={"multipart/form-data": ArtifactUploadSerializer}, responses={201: ArtifactSerializer},
                   description="Store a file as the run's artifact `name` (a same-named one is replaced). Engineers of the "
                               "run's team only; the per-file limit is TRAINYARD_ARTIFACT_MAX_BYTES.")
    def post(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        artifact_write_check(run=run, actor=request.user)  # a viewer is refused before the upload is read
        body = ArtifactUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        upload = body.validated_data["file"]
        name = body.validated_data.get("name") or upload.name or ""
        if not name:
            raise FieldError("name", "is required when the file has no name")
        content_type = body.validated_data.get("content_type") or ""
        if not content_type and artifact_content_type(name=name) == "application/octet-stream":
            # The name says nothing: the part's own header may (clients send text/plain by default).
            content_type = upload.content_type or ""
        artifact = artifact_store(run=run, name=name, fileobj=upload, content_type=content_type, actor=request.user)
        return Response(ArtifactSerializer(artifact, context={"request": request}).data, status=status.HTTP_201_CREATED)


class _AnyAccept(DefaultContentNegotiation):
    """A download answers its file whatever Accept says (an <img> asks for image/*); errors stay JSON."""

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type


class RunArtifactFileView(_RunScoped):
    content_negotiation_class = _AnyAccept

    @extend_schema(operation_id="runs_artifacts_download", responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
                   description="The file, with its content type; images inline, everything else as an attachment. "
                               "With an S3-compatible store it is a 302 to a short-lived store URL that answers the same.")
    def get(self, request: Request, pk: int, name: str) -> HttpResponseBase:
        run = self.get_object()  # another tenant's run is a 404 before any URL is made
        artifact: Artifact = artifact_get(run=run, name=name)
        url = artifact_download_url(artifact=artifact)
        if url is not None:
            # S3: the client fetches it from the store; no web worker carries the bytes.
            return store_redirect(url)
        try:
            body = artifact_open(artifact=artifact)
        except ObjectMissing:
            raise Http404 from None
        response = FileResponse(body, content_type=artifact.content_type or "application/octet-stream",
                                as_attachment=not artifact_served_inline(artifact=artifact),
                                filename=artifact.name.rsplit("/", 1)[-1])
        response["Content-Length"] = str(artifact.size)
        response["Content-Security-Policy"] = DOWNLOAD_CSP
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, no-cache"
        response["ETag"] = f'"{artifact.sha256}"'
        return response
