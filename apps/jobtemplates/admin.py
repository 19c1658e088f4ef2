"""Admins manage templates here. Published versions are read-only: "New version from this"
copies one into a new draft, which "Publish" makes runnable."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.core.errors import ServiceError
from apps.jobtemplates.models import ApprovedImage, JobTemplate
from apps.jobtemplates.services import (
    EDITABLE_FIELDS,
    image_approve,
    template_create,
    template_new_version,
    template_publish,
    template_update,
)


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    list_display = ["slug", "version", "title", "kind", "published", "published_at"]
    list_filter = ["kind", "published"]
    search_fields = ["slug", "title"]
    actions = ["publish", "new_version"]
    fields = ["slug", "version", "published", "published_at", *EDITABLE_FIELDS]

    def get_readonly_fields(self, request: HttpRequest, obj: JobTemplate | None = None) -> list[str]:
        if obj is not None and obj.published:
            return [str(name) for name in self.fields or []]
        if obj is not None:
            return ["slug", "version", "published", "published_at"]
        return ["version", "published", "published_at"]

    def has_delete_permission(self, request: HttpRequest, obj: JobTemplate | None = None) -> bool:
        # Runs reference versions; a published one is history.
        return obj is None or not obj.published

    def save_model(self, request: HttpRequest, obj: JobTemplate, form: Any, change: bool) -> None:
        fields = {name: getattr(obj, name) for name in EDITABLE_FIELDS}
        try:
            if change:
                saved = template_update(template=obj, **fields)
            else:
                saved = template_create(slug=obj.slug, **fields)
        except ServiceError as err:
            messages.error(request, err.message)
            raise
        obj.pk, obj.version = saved.pk, saved.version

    @admin.action(description="Publish selected drafts")
    def publish(self, request: HttpRequest, queryset: QuerySet[JobTemplate]) -> None:
        for template in queryset.order_by("pk"):
            template_publish(template=template)
        messages.success(request, f"Published {queryset.count()} template version(s).")

    @admin.action(description="New version from this (a draft copy)")
    def new_version(self, request: HttpRequest, queryset: QuerySet[JobTemplate]) -> None:
        for template in queryset.order_by("pk"):
            draft = template_new_version(template=template)
            messages.success(request, f"Created draft {draft}; edit it, then publish it.")


@admin.register(ApprovedImage)
class ApprovedImageAdmin(admin.ModelAdmin):
    """The container images jobs may run in (container mode). Templates name one; a submission
    asking for any other is refused. Untick "active" to stop new runs using one."""

    list_display = ["name", "digest", "active", "created_at"]
    list_filter = ["active"]
    search_fields = ["name", "digest"]
    fields = ["name", "digest", "description", "active"]

    def has_delete_permission(self, request: HttpRequest, obj: ApprovedImage | None = None) -> bool:
        return obj is None or not obj.templates.exists()  # templates (and so runs) keep naming it

    def save_model(self, request: HttpRequest, obj: ApprovedImage, form: Any, change: bool) -> None:
        saved = image_approve(name=obj.name, digest=obj.digest, description=obj.description)
        if not obj.active:
            ApprovedImage.objects.filter(pk=saved.pk).update(active=False)
        obj.pk = saved.pk
