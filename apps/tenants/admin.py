"""Admin for tenants. Saves and deletes go through the services so each leaves an AuditEvent."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.audit.context import acting_as
from apps.audit.middleware import client_ip
from apps.tenants import services
from apps.tenants.models import Membership, Project, Team


class ServiceAdmin(admin.ModelAdmin):
    fields_to_save: list[str] = []

    def _act(self, request: HttpRequest) -> Any:
        return acting_as(user=request.user, ip=client_ip(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    readonly_fields = ["user", "role"]
    can_delete = False
    show_change_link = True


@admin.register(Team)
class TeamAdmin(ServiceAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        with self._act(request):
            if change:
                # The form already wrote its values onto obj: give the service the stored row,
                # or the event's "before" would show the new values.
                services.team_update(team=Team.objects.get(pk=obj.pk), slug=obj.slug, name=obj.name)
            else:
                created = services.team_create(slug=obj.slug, name=obj.name)
                obj.pk = created.pk

    def delete_model(self, request: HttpRequest, obj: Team) -> None:
        with self._act(request):
            services.team_delete(team=obj)


@admin.register(Project)
class ProjectAdmin(ServiceAdmin):
    list_display = ["__str__", "name", "created_at"]
    list_filter = ["team"]
    search_fields = ["slug", "name"]

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        with self._act(request):
            if change:
                stored = Project.objects.get(pk=obj.pk)  # see TeamAdmin.save_model
                services.project_update(project=stored, name=obj.name, slug=obj.slug, description=obj.description, team=obj.team)
            else:
                created = services.project_create(team=obj.team, slug=obj.slug, name=obj.name, description=obj.description)
                obj.pk = created.pk

    def delete_model(self, request: HttpRequest, obj: Project) -> None:
        with self._act(request):
            services.project_delete(project=obj)


@admin.register(Membership)
class MembershipAdmin(ServiceAdmin):
    list_display = ["team", "user", "role"]
    list_filter = ["team", "role"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        # membership_set keys on (team, user): changing either would quietly add a second
        # membership and leave the old one. Only the role changes; anything else is delete + add.
        return ["team", "user"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        with self._act(request):
            saved = services.membership_set(team=obj.team, user=obj.user, role=obj.role)
            obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        with self._act(request):
            services.membership_delete(membership=obj)
