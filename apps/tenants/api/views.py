from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.listing import LIST_BACKENDS
from apps.core.errors import FieldError, Forbidden
from apps.tenants import services
from apps.tenants.api.scoped import ScopedModelViewSet, ScopedReadOnlyViewSet
from apps.tenants.api.serializers import (
    ProjectCreateSerializer,
    ProjectSerializer,
    ProjectUpdateSerializer,
    TeamSerializer,
)
from apps.tenants.models import Membership, Project, Team
from apps.tenants.selectors import has_role, team_list


class TeamViewSet(ScopedReadOnlyViewSet):
    """Teams you belong to, with your role in each."""

    team_path = ""
    queryset = Team.objects.all()
    serializer_class = TeamSerializer
    filter_backends = LIST_BACKENDS
    ordering_fields = ["slug", "name", "created_at", "id"]
    ordering = ["slug"]

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        user = self.request.user
        if user.is_authenticated:
            context["roles"] = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        return context


class ProjectViewSet(ScopedModelViewSet):
    """Projects of your teams. Team admins create, rename and delete them."""

    team_path = "team"
    write_role = "admin"
    queryset = Project.objects.select_related("team")
    serializer_class = ProjectSerializer
    filter_backends = LIST_BACKENDS
    ordering_fields = {"team": "team__slug", "slug": "slug", "name": "name", "created_at": "created_at", "id": "id"}
    ordering = ["team__slug", "slug"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_base_queryset(self) -> QuerySet[Project]:
        return Project.objects.select_related("team")

    @extend_schema(request=ProjectCreateSerializer, responses={201: ProjectSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = ProjectCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = team_list(user=request.user).filter(slug=data.validated_data["team"]).first()
        if team is None:
            raise FieldError("team", "no such team")
        if not has_role(user=request.user, team_id=team.pk, at_least="admin"):
            raise Forbidden("Only team admins may create projects.")
        if Project.objects.filter(team=team, slug=data.validated_data["slug"]).exists():
            raise FieldError("slug", "a project with this slug already exists in the team")
        project = services.project_create(
            team=team,
            slug=data.validated_data["slug"],
            name=data.validated_data["name"],
            description=data.validated_data["description"],
        )
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ProjectUpdateSerializer, responses={200: ProjectSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        project = self.get_object()
        data = ProjectUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        project = services.project_update(project=project, **data.validated_data)
        return Response(ProjectSerializer(project).data)

    def perform_destroy(self, instance: Project) -> None:
        services.project_delete(project=instance)
