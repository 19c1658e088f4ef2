"""Project secrets over the API: team admins set and delete; members list names and dates.

Values are write-only. The views render JSON only (no browsable form could echo a posted value).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import NotFound
from apps.tenants.api.scoped import ScopedMixin
from apps.tenants.models import Project
from apps.vault import selectors, services
from apps.vault.api.serializers import SecretSerializer, SecretWriteSerializer


class _ProjectSecretsBase(ScopedMixin, generics.GenericAPIView):
    team_path = "team"
    queryset = Project.objects.select_related("team")
    lookup_url_kwarg = "project_id"
    renderer_classes = [JSONRenderer]
    serializer_class = SecretSerializer
    # A project has a handful of secrets: the list is one bare array, and the schema must say so
    # (with the default pagination class drf-spectacular documents a paginated envelope).
    pagination_class = None


class ProjectSecretListView(_ProjectSecretsBase):
    @extend_schema(responses={200: SecretSerializer(many=True)})
    def get(self, request: Request, project_id: int) -> Response:
        project = self.get_object()
        return Response(SecretSerializer(selectors.secret_list(project=project), many=True).data)

    @extend_schema(request=SecretWriteSerializer, responses={201: SecretSerializer, 200: SecretSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = self.get_object()
        services.secret_edit_check(user=request.user, project=project)  # 403 before any field error
        body = SecretWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        secret, created = services.secret_set(project=project, name=body.validated_data.get("name"),
                                              value=body.validated_data["value"], user=request.user)
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ProjectSecretDetailView(_ProjectSecretsBase):
    @extend_schema(responses={200: SecretSerializer})
    def get(self, request: Request, project_id: int, name: str) -> Response:
        project = self.get_object()
        secret = selectors.secret_list(project=project).filter(name=name).first()
        if secret is None:
            raise NotFound(f"no secret named {name[:80]!r} in this project")
        return Response(SecretSerializer(secret).data)

    @extend_schema(request=SecretWriteSerializer, responses={201: SecretSerializer, 200: SecretSerializer})
    def put(self, request: Request, project_id: int, name: str) -> Response:
        project = self.get_object()
        services.secret_edit_check(user=request.user, project=project)  # 403 before any field error
        body = SecretWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        secret, created = services.secret_set(project=project, name=name, value=body.validated_data["value"], user=request.user)
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, project_id: int, name: str, *args: Any) -> Response:
        project = self.get_object()
        services.secret_delete(project=project, name=name, user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
