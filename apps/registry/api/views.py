"""Registered models over the API: members read; engineers and admins register, promote, roll back."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.listing import POLLING_LIST_BACKENDS
from apps.core.errors import FieldError, NotFound
from apps.registry import selectors, services
from apps.registry.api.serializers import (
    ModelVersionSerializer,
    ModelWriteSerializer,
    PromoteSerializer,
    RegisteredModelDetailSerializer,
    RegisteredModelSerializer,
    StageSerializer,
    VersionCostSerializer,
    VersionCreateSerializer,
)
from apps.registry.models import ModelVersion, RegisteredModel
from apps.tenants.api.scoped import ScopedModelViewSet, UnscopedAPIMixin
from apps.tenants.selectors import project_by_ref_or_error

VERSIONS = Prefetch("versions", queryset=ModelVersion.objects.select_related("source_run", "created_by", "replaced", "model__project"))
NUMBER = r"versions/(?P<number>[0-9]+)"




class RegisteredModelViewSet(ScopedModelViewSet):
    """A project's registered models, each with its versions, stages and evidence."""

    team_path = "project__team"
    write_role = "engineer"
    serializer_class = RegisteredModelSerializer
    queryset = RegisteredModel.objects.select_related("project__team").prefetch_related(VERSIONS).order_by("pk")
    filter_backends = POLLING_LIST_BACKENDS
    ordering_fields = ["created_at", "updated_at", "name", "id"]
    ordering = ["id"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.request.query_params.get("project"):
            queryset = queryset.filter(project=project_by_ref_or_error(user=self.request.user, ref=self.request.query_params["project"]))
        return super().filter_queryset(queryset)

    def _version(self, number: str) -> ModelVersion:
        model = self.get_object()
        version = model.versions.select_related("model__project", "checkpoint").filter(number=int(number)).first()
        if version is None:
            raise NotFound(f"{model.name} has no version {number}")
        return version

    @extend_schema(parameters=[OpenApiParameter("project", OpenApiTypes.STR, description="Project id or 'team/project'.")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: RegisteredModelDetailSerializer})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(RegisteredModelDetailSerializer(self.get_object()).data)

    @extend_schema(request=ModelWriteSerializer, responses={201: RegisteredModelDetailSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ModelWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "project" not in data:
            raise FieldError("project", "required")
        project = project_by_ref_or_error(user=request.user, ref=data["project"])
        services.registry_edit_check(user=request.user, project=project)  # 403 before any field error
        model = services.model_create(project=project, name=data.get("name"), user=request.user,
                                      description=data.get("description", ""), thresholds=data.get("thresholds"))
        return Response(RegisteredModelDetailSerializer(model).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ModelWriteSerializer, responses={200: RegisteredModelDetailSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        model = self.get_object()
        body = ModelWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        changes = {k: v for k, v in body.validated_data.items() if k in ("description", "thresholds")}
        services.model_update(model=model, user=request.user, **changes)
        return Response(RegisteredModelDetailSerializer(self.get_object()).data)

    @extend_schema(exclude=True)
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.partial_update(request, *args, **kwargs)

    @extend_schema(request=VersionCreateSerializer, responses={201: ModelVersionSerializer})
    @action(detail=True, methods=["post"], url_path="versions")
    def versions(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Register a checkpoint (or an artifact) of a run of this project as a new (candidate) version."""
        model = self.get_object()
        body = VersionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        version = services.version_create(model=model, user=request.user, checkpoint=data.get("checkpoint"), run=data.get("run"),
                                          artifact=data.get("artifact"),
                                          description=data.get("description", ""))
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: ModelVersionSerializer})
    @action(detail=True, methods=["get"], url_path=rf"{NUMBER}")
    def version(self, request: Request, number: str, *args: Any, **kwargs: Any) -> Response:
        return Response(ModelVersionSerializer(self._version(number)).data)

    @extend_schema(request=StageSerializer, responses={200: ModelVersionSerializer})
    @action(detail=True, methods=["post"], url_path=rf"{NUMBER}/stage")
    def stage(self, request: Request, number: str, *args: Any, **kwargs: Any) -> Response:
        """Move a version to candidate, staging or archived (production goes through promote)."""
        version = self._version(number)  # 404 and 403 before any field error
        body = StageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = services.version_set_stage(version=version, stage=body.validated_data["stage"], user=request.user)
        return Response(ModelVersionSerializer(version).data)

    @extend_schema(request=PromoteSerializer, responses={200: ModelVersionSerializer})
    @action(detail=True, methods=["post"], url_path=rf"{NUMBER}/promote")
    def promote(self, request: Request, number: str, *args: Any, **kwargs: Any) -> Response:
        """To production, on a succeeded evaluate run of this version that meets every threshold of the model."""
        version = self._version(number)  # 404 and 403 before any field error
        body = PromoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = services.version_promote(version=version, user=request.user,
                                           evidence_run=body.validated_data.get("evidence_run"))
        return Response(ModelVersionSerializer(version).data)

    @extend_schema(request=None, responses={200: ModelVersionSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Production goes back to the version the current one replaced."""
        version = services.model_rollback(model=self.get_object(), user=request.user)
        return Response(ModelVersionSerializer(version).data)


class ModelVersionCostView(UnscopedAPIMixin, APIView):
    """Cost per model version (its training family's spend): finance sees every team's; members their teams'."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(responses={200: VersionCostSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(VersionCostSerializer(selectors.version_costs(user=request.user), many=True).data)
