"""The base for every tenant-owned API view: querysets are scoped to the user's teams.

Subclasses say where the team is (``team_path``) and give an unscoped base queryset in
``get_base_queryset``; they may not override ``get_queryset`` (refused at class creation), so a
new endpoint cannot forget the scope. Another team's object is therefore simply absent: a 404.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import Model, QuerySet
from rest_framework import permissions, viewsets
from rest_framework.request import Request

from apps.audit.context import AuditContext, _current
from apps.audit.middleware import client_ip
from apps.tenants.selectors import has_role, team_ids_for_user


class _AuditContextMixin:
    def perform_authentication(self, request: Request) -> None:
        # Token users exist only after DRF authenticates; record them as the actor from here on.
        user = request.user
        if user is not None and user.is_authenticated:
            _current.set(AuditContext(user=user, ip=client_ip(request._request)))


class ScopedMixin(_AuditContextMixin):
    team_path: ClassVar[str] = "project__team"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: override get_base_queryset(), not get_queryset(); the scope must stay")

    def get_base_queryset(self) -> QuerySet[Any]:
        queryset = getattr(self, "queryset", None)
        if queryset is None:
            raise NotImplementedError("set queryset or define get_base_queryset()")
        return queryset.all()

    def get_queryset(self) -> QuerySet[Any]:
        request: Request = self.request  # type: ignore[attr-defined]
        ids = team_ids_for_user(user=request.user)
        lookup = "pk__in" if self.team_path == "" else f"{self.team_path}_id__in"
        return self.get_base_queryset().filter(**{lookup: ids})


class RolePermission(permissions.BasePermission):
    """Reads need membership (already implied by the scope); writes need `write_role`."""

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        role = getattr(view, "write_role", "engineer")
        team_id = view.team_id_of(obj)
        return has_role(user=request.user, team_id=team_id, at_least=role)


class ScopedReadOnlyViewSet(ScopedMixin, viewsets.ReadOnlyModelViewSet):
    pass


class ScopedModelViewSet(ScopedMixin, viewsets.ModelViewSet):
    write_role: ClassVar[str] = "engineer"
    permission_classes = [permissions.IsAuthenticated, RolePermission]

    def team_id_of(self, obj: Model) -> int:
        target: Any = obj
        if self.team_path:
            for part in self.team_path.split("__"):
                target = getattr(target, part)
        return int(target.pk)


class UnscopedAPIMixin(_AuditContextMixin):
    """For views over objects no tenant owns (templates, pools): the name says it is unscoped."""
