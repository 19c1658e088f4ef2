"""Writes to job templates. A published version is immutable: an edit makes a new version, so
runs keep exactly the version they were submitted with."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from apps.audit.services import audit_record, snapshot
from apps.core.errors import Conflict, FieldError, ServiceError
from apps.jobtemplates.models import ApprovedImage, JobTemplate
from recipes.schema import ParamError, divisible_rules

# Fields a new version may change; slug and version are the identity.
EDITABLE_FIELDS = [
    "title",
    "description",
    "kind",
    "entrypoint",
    "param_schema",
    "resources",
    "checkpoint_policy",
    "launch",
    "grace_period_s",
    "max_restarts",
    "environment",
    "total_steps_param",
    "source_hash",
    "image",
]
AUDIT_FIELDS = ["slug", "version", "title", "kind", "entrypoint", "published"]
IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


JSON_FIELDS = ["param_schema", "resources", "checkpoint_policy", "environment"]


def _clean(template: JobTemplate) -> None:
    """Model validation as a 400 naming the field (empty JSON objects are fine here)."""
    try:
        template.full_clean(exclude=JSON_FIELDS)
    except ValidationError as err:
        fields = {name: [str(m) for m in messages] for name, messages in err.message_dict.items()}
        raise ServiceError("; ".join(f"{k}: {v[0]}" for k, v in fields.items()), fields=fields) from err


def _check_schema(schema: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        raise FieldError("param_schema", f"not a valid JSON Schema: {err.message}") from err
    if schema and schema.get("type", "object") != "object":
        raise FieldError("param_schema", "must describe an object")
    try:
        # Rules across parameters (x-divisible) are checked at every submission: refuse a malformed one here, once.
        divisible_rules(schema)
    except ParamError as err:
        raise FieldError("param_schema", str(err)) from err


# checkpoint_policy keys -> the largest value each may take (the agent passes them to the job's SDK).
CHECKPOINT_POLICY_LIMITS = {"every_steps": 10**9, "every_seconds": 30 * 86400, "keep_last": 1000}


def _check_checkpoint_policy(policy: Any) -> None:
    """every_steps, every_seconds and keep_last as whole numbers in range; keep_best as
    "metric:min" or "metric:max" (the checkpoint kept besides the last keep_last)."""
    field = "checkpoint_policy"
    if not isinstance(policy, dict):
        raise FieldError(field, "must be an object")
    for key, value in policy.items():
        if key == "keep_best":
            metric, _, mode = str(value).rpartition(":") if isinstance(value, str) else ("", "", "")
            if not metric or len(metric) > 200 or mode not in ("min", "max"):
                raise FieldError(field, f"keep_best must be 'metric:min' or 'metric:max', got {value!r}")
        elif key in CHECKPOINT_POLICY_LIMITS:
            top = CHECKPOINT_POLICY_LIMITS[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise FieldError(field, f"{key} must be a whole number from 0 to {top}, got {value!r}")
        else:
            known = ", ".join([*CHECKPOINT_POLICY_LIMITS, "keep_best"])
            raise FieldError(field, f"unknown key {key!r} (known: {known})")


@transaction.atomic
def template_create(*, slug: str, publish: bool = False, **fields: Any) -> JobTemplate:
    """A new version of ``slug`` (version 1 if it is new), optionally published at once."""
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise FieldError(sorted(unknown)[0], "not a template field")
    _check_schema(fields.get("param_schema") or {})
    _check_checkpoint_policy(fields.get("checkpoint_policy", {}))
    latest = JobTemplate.objects.select_for_update().filter(slug=slug).aggregate(v=Max("version"))["v"] or 0
    template = JobTemplate(slug=slug, version=latest + 1, **fields)
    if publish:
        template.published = True
        template.published_at = timezone.now()
    _clean(template)
    template.save()
    audit_record(action="template.create", target=template, after=snapshot(template, AUDIT_FIELDS))
    return template


@transaction.atomic
def template_update(*, template: JobTemplate, **changes: Any) -> JobTemplate:
    """Edits a draft in place; a published template is refused (make a new version instead)."""
    locked = JobTemplate.objects.select_for_update().get(pk=template.pk)
    if locked.published:
        raise Conflict(f"{locked} is published and immutable; create a new version instead", code="template_published")
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise FieldError(sorted(unknown)[0], "not a template field")
    if "param_schema" in changes:
        _check_schema(changes["param_schema"])
    if "checkpoint_policy" in changes:
        _check_checkpoint_policy(changes["checkpoint_policy"])
    before = snapshot(locked, AUDIT_FIELDS)
    for key, value in changes.items():
        setattr(locked, key, value)
    _clean(locked)
    locked.save()
    audit_record(action="template.update", target=locked, before=before, after=snapshot(locked, AUDIT_FIELDS))
    return locked


@transaction.atomic
def template_publish(*, template: JobTemplate) -> JobTemplate:
    """Publishes a draft; publishing an already published version is a no-op."""
    locked = JobTemplate.objects.select_for_update().get(pk=template.pk)
    if locked.published:
        return locked
    before = snapshot(locked, AUDIT_FIELDS)
    # A conditional update: the model's save() refuses any write to a published row, and this
    # is the one write that makes it published.
    JobTemplate.objects.filter(pk=locked.pk, published=False).update(published=True, published_at=timezone.now())
    locked.refresh_from_db()
    audit_record(action="template.publish", target=locked, before=before, after=snapshot(locked, AUDIT_FIELDS))
    return locked


def template_new_version(*, template: JobTemplate, publish: bool = False, **changes: Any) -> JobTemplate:
    """A new draft (or published) version copied from ``template`` with ``changes`` applied."""
    fields = {name: getattr(template, name) for name in EDITABLE_FIELDS}
    fields.update(changes)
    return template_create(slug=template.slug, publish=publish, **fields)


# --- approved container images ----------------------------------------------------------------

IMAGE_AUDIT_FIELDS = ["name", "digest", "active"]


@transaction.atomic
def image_approve(*, name: str, digest: str, description: str = "") -> ApprovedImage:
    """Adds an image to the approved list (or re-approves one by name with this digest)."""
    image = ApprovedImage.objects.select_for_update().filter(name=name).first()
    before = snapshot(image, IMAGE_AUDIT_FIELDS) if image is not None else None
    image = image or ApprovedImage(name=name)
    image.digest, image.description, image.active = digest, description, True
    try:
        image.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as err:
        fields = {k: [str(m) for m in v] for k, v in err.message_dict.items()}
        raise ServiceError("; ".join(f"{k}: {v[0]}" for k, v in fields.items()), fields=fields) from err
    if not IMAGE_DIGEST.fullmatch(digest):
        raise FieldError("digest", f"must be sha256: and 64 lowercase hex digits (got {digest[:80]!r})")
    image.save()
    audit_record(action="image.approve", target=image, before=before, after=snapshot(image, IMAGE_AUDIT_FIELDS))
    return image


def image_for_submission(*, template: JobTemplate, requested: Any) -> ApprovedImage | None:
    """The image a run of ``template`` runs in: the template's own. A submission may name it (by
    name or name@digest) but no other; an image off the approved list is refused by name."""
    own = template.image
    if own is not None and not own.active:
        raise FieldError("image", f"this template's image {own.name} is no longer approved; ask an admin for a new template version")
    if requested in (None, ""):
        return own
    if not isinstance(requested, str) or len(requested) > 400:
        raise FieldError("image", "must be an image name such as 'registry/train:1' or name@sha256:digest (at most 400 characters)")
    name, _, digest = requested.partition("@")
    approved = ApprovedImage.objects.filter(name=name, active=True).first()
    if approved is None or (digest and digest != approved.digest):
        listed = ", ".join(ApprovedImage.objects.filter(active=True).values_list("name", flat=True)[:10]) or "none"
        raise FieldError("image", f"{requested!r} is not an approved image (approved: {listed})")
    if own is None or approved.pk != own.pk:
        runs_in = f"runs in {own.name}" if own is not None else "names no container image"
        raise FieldError("image", f"{requested!r} is approved, but this template {runs_in}: a run uses its template's image")
    return own
