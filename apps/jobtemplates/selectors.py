"""Reads over job templates: engineers see published versions only; staff also see drafts."""

from __future__ import annotations

from django.db.models import Max, OuterRef, QuerySet, Subquery

from apps.core.errors import NotFound
from apps.jobtemplates.models import ApprovedImage, JobTemplate
from apps.tenants.selectors import AnyUser


def _visible(*, user: AnyUser) -> QuerySet[JobTemplate]:
    queryset = JobTemplate.objects.all()
    if not getattr(user, "is_staff", False):
        queryset = queryset.filter(published=True)
    return queryset


def template_list(*, user: AnyUser, published_only: bool = False) -> QuerySet[JobTemplate]:
    """The latest visible version of each template, by slug (of published ones if asked)."""
    visible = _visible(user=user)
    if published_only:
        visible = visible.filter(published=True)
    latest = visible.filter(slug=OuterRef("slug")).values("slug").annotate(v=Max("version")).values("v")
    return visible.filter(version=Subquery(latest)).select_related("image").order_by("slug")


def template_versions(*, user: AnyUser, slug: str) -> QuerySet[JobTemplate]:
    return _visible(user=user).filter(slug=slug).order_by("-version")


def template_get(*, user: AnyUser, slug: str, version: int | None = None) -> JobTemplate:
    """The latest published version of ``slug`` (or the given one); NotFound if not visible."""
    versions = template_versions(user=user, slug=slug)
    if version is None:
        # Submitting uses the latest *published* version even for staff: drafts are not runnable.
        template = versions.filter(published=True).first() or versions.first()
    else:
        template = versions.filter(version=version).first()
    if template is None:
        raise NotFound(f"no template {slug!r}" + (f" version {version}" if version is not None else ""))
    return template


def image_list() -> QuerySet[ApprovedImage]:
    """The approved container images a template may name (no tenant owns them)."""
    return ApprovedImage.objects.filter(active=True).order_by("name")
