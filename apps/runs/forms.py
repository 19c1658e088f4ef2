"""The submission form, generated from a template's JSON Schema: one input per parameter, with
its default, bounds and help; posted strings are turned back into typed values, and the post into
a Submission, so its errors read the same as the API's."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.http import QueryDict

from apps.jobtemplates.models import JobTemplate
from apps.runs.models import Priority, Run
from apps.runs.services.rerun import LINK_TAGS, run_resources
from apps.runs.services.submission import TEXT_INPUTS, Errors, Submission, resources_resolve, submission_from_data
from apps.tenants.models import Project

INT_RE = re.compile(r"^[+-]?\d+$")
FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
TAG_FIELDS = ("task", "dataset", "candidate", "family")
RESOURCE_FIELDS = ("pool", "nodes", "devices_per_node", "max_runtime_s", "memory_gib_per_device", "cpus_per_device")
# Resources a clone carries in hidden inputs (the form has no input for them): preemptible
# ("true"/"false") and the acceptable pools (comma-separated).
CARRIED_RESOURCES = ("preemptible", "pools")
# The hidden input pinning a clone to its source's template version, as "slug@version" (a form
# switched to another template takes that one's latest published version).
TEMPLATE_VERSION = "template_version"
# Resources that take fractions (1.5 GiB, half a core); the others are whole numbers.
FRACTIONAL_RESOURCES = ("memory_gib_per_device", "cpus_per_device")


@dataclass
class ParamField:
    name: str
    kind: str  # number, integer, boolean, select, json, text
    value: Any
    default: Any
    help: str = ""
    minimum: Any = None
    maximum: Any = None
    choices: list[Any] = field(default_factory=list)
    required: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def input_name(self) -> str:
        return f"p_{self.name}"

    @property
    def default_text(self) -> str:
        """The default as people type it into the form: JSON (false, [0, 1], {"lr": ...}), not Python."""
        return self.default if isinstance(self.default, str) else json.dumps(self.default)

    @property
    def step(self) -> str:
        return "1" if self.kind == "integer" else "any"

    @property
    def bounds(self) -> str:
        low = self.minimum if self.minimum is not None else None
        high = self.maximum if self.maximum is not None else None
        if low is not None and high is not None:
            return f"{low} – {high}"
        if low is not None:
            return f"≥ {low}"
        if high is not None:
            return f"≤ {high}"
        return ""


def _kind(prop: dict[str, Any]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in prop:
        return "select"
    if kind in ("integer", "number", "boolean"):
        return str(kind)
    if kind in ("array", "object"):
        return "json"
    return "text"


def _display(kind: str, value: Any) -> Any:
    if kind == "json":
        return json.dumps(value, indent=1 if isinstance(value, dict) else None) if value is not None else ""
    return "" if value is None else value


def param_fields(*, template: JobTemplate, values: dict[str, Any] | None = None) -> list[ParamField]:
    schema = template.param_schema or {}
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema.get("properties", {}).items():
        kind = _kind(prop)
        default = prop.get("default")
        value = values[name] if values is not None and name in values else _display(kind, default)
        out.append(ParamField(
            name=name, kind=kind, value=value, default=default, help=prop.get("description", ""),
            minimum=prop.get("minimum", prop.get("exclusiveMinimum")), maximum=prop.get("maximum", prop.get("exclusiveMaximum")),
            choices=list(prop.get("enum", [])), required=name in required,
        ))
    return out


def params_from_post(*, template: JobTemplate, post: QueryDict) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]]]:
    """(typed params, raw values to redisplay, errors for inputs that are not even parseable)."""
    params: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for f in param_fields(template=template):
        text = post.get(f.input_name)
        if f.kind == "boolean":
            params[f.name] = raw[f.name] = text in ("on", "true", "1")
            continue
        text = (text or "").strip()
        raw[f.name] = text
        if text == "":
            continue  # the default applies
        if f.kind == "integer":
            params[f.name] = int(text) if INT_RE.match(text) else text
        elif f.kind == "number":
            params[f.name] = (int(text) if INT_RE.match(text) else float(text)) if FLOAT_RE.match(text) else text
        elif f.kind == "json":
            try:
                params[f.name] = json.loads(text)
            except ValueError:
                errors.setdefault(f"params.{f.name}", []).append("must be valid JSON")
        elif f.kind == "select":
            chosen = next((c for c in f.choices if str(c) == text), text)
            params[f.name] = chosen
        else:
            params[f.name] = text
    return params, raw, errors


@dataclass(frozen=True)
class PostedSubmission:
    submission: Submission
    values: dict[str, Any]  # the raw parameter values, to show again
    errors: dict[str, list[str]]  # the form's own: what does not even parse, a project not offered


def submission_from_post(*, project: Project, template: JobTemplate, post: QueryDict) -> PostedSubmission:
    """The submission the form's post asks for, of the project and template the form shows."""
    params, values, errors = params_from_post(template=template, post=post)
    if str(project.pk) != post.get("project"):
        # Never fall back to another project on a POST: the run would land somewhere unasked.
        errors.setdefault("project", []).append("no such project")
    tags = {key: value for key in TAG_FIELDS if (value := post.get(f"tag_{key}", "").strip())}
    extra, tag_errors = extra_tags_from_text(post.get("extra_tags", ""))
    if tag_errors:
        errors.setdefault("extra_tags", []).extend(tag_errors)
    data = {
        "project": project, "template": template, "params": params, "tags": {**extra, **tags},
        "priority": post.get("priority") or Priority.NORMAL, "resources": resources_from_post(post),
        "init_run": post.get("init_run", "").strip() or None, "code_snapshot": post.get("code_snapshot", "").strip(),
        "secrets": post.getlist("secrets"), **{text.name: post.get(text.name, "").strip() for text in TEXT_INPUTS},
    }
    return PostedSubmission(submission=submission_from_data(data), values=values, errors=errors)


def extra_tags_from_text(text: str) -> tuple[dict[str, str], list[str]]:
    tags: dict[str, str] = {}
    errors = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            errors.append(f"{line!r}: write one key=value per line")
            continue
        tags[key.strip()] = value.strip()
    return tags, errors


def resources_from_post(post: QueryDict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in RESOURCE_FIELDS:
        text = (post.get(f"res_{name}") or "").strip()
        if text:
            out[name] = _resource_value(name, text)
    preemptible = (post.get("res_preemptible") or "").strip()
    if preemptible:
        # Anything but true/false goes on as text, for the submission's check to name the field.
        out["preemptible"] = {"true": True, "false": False}.get(preemptible, preemptible)
    pools = [name.strip() for name in (post.get("res_pools") or "").split(",") if name.strip()]
    if pools:
        out["pools"] = pools
    return out


def _resource_value(name: str, text: str) -> Any:
    """A resource input as the submission takes it: a number where it parses as one (the check
    names the field when it does not)."""
    if name in FRACTIONAL_RESOURCES and FLOAT_RE.match(text):
        return int(text) if INT_RE.match(text) else float(text)
    return int(text) if INT_RE.match(text) and name != "pool" else text


def tag_defaults(*, template: JobTemplate | None, username: str) -> dict[str, str]:
    """What the tag inputs hold until someone types in them."""
    return {"task": template.kind if template else "", "dataset": "sklearn-digits", "candidate": "baseline",
            "family": f"{template.slug}-{username}" if template else ""}


def _param_changed(field: ParamField, typed: dict[str, Any], raw: Any) -> bool:
    if field.kind == "boolean":
        return bool(raw) != bool(field.default)
    # Empty means "the default"; text that does not even parse (bad JSON) was typed, so it counts.
    return raw != "" and (field.name not in typed or typed[field.name] != field.default)


def form_reloaded(*, old: JobTemplate, new: JobTemplate, post: QueryDict, username: str) -> tuple[QueryDict, dict[str, Any]]:
    """The form loaded again for another template or project, from ``post`` (what it held for ``old``):
    (the inputs to show again, the raw parameter values to show again).

    Only what the user changed carries over. An input still at the old template's default takes the
    new template's (ddp-train's 2 nodes, not the 1 digits-classifier offered), or the user would be
    left with defaults that belong to another template. A changed value carries over where the new
    template takes it: a parameter of the same name and kind (a choice it still offers), a resource
    within its limits. The rest is dropped, never refused: nothing was submitted."""
    kept = post.copy()
    for key in [k for k in kept if k.startswith(("p_", "res_", "tag_"))]:
        del kept[key]
    typed, raw, _ = params_from_post(template=old, post=post)
    before = {f.name: f for f in param_fields(template=old)}
    values: dict[str, Any] = {}
    for f in param_fields(template=new):
        was = before.get(f.name)
        if was is None or was.kind != f.kind or not _param_changed(was, typed, raw[f.name]):
            continue
        if f.kind == "select" and not any(str(c) == raw[f.name] for c in f.choices):
            continue
        values[f.name] = raw[f.name]
        if f.kind != "boolean":
            kept[f.input_name] = raw[f.name]
        elif raw[f.name]:
            kept[f.input_name] = "on"
    old_resources = old.resources or {}
    changed: dict[str, Any] = {}
    for name in RESOURCE_FIELDS:
        text = (post.get(f"res_{name}") or "").strip()
        value = _resource_value(name, text)
        if text and value != old_resources.get(name):
            changed[name] = value
    if changed:
        # The submission's own check says what the new template allows, so the two never disagree.
        refused = Errors()
        resources_resolve(template=new, resources=changed, errors=refused)
        for name, value in changed.items():
            if f"resources.{name}" not in refused.fields:
                kept[f"res_{name}"] = str(value)
    old_tags = tag_defaults(template=old, username=username)
    for key in TAG_FIELDS:
        text = (post.get(f"tag_{key}") or "").strip()
        if text and text != old_tags[key]:
            kept[f"tag_{key}"] = text
    return kept, values


def expected_cost(*, price: Decimal, nodes: int, devices_per_node: int, max_runtime_s: int) -> Decimal:
    """The most a run can cost: every device for its whole max runtime (the prediction for now)."""
    return (price * nodes * devices_per_node * Decimal(max_runtime_s) / Decimal(3600)).quantize(Decimal("0.01"))


def tags_text(tags: dict[str, Any], *, skip: tuple[str, ...] = ()) -> str:
    """Tags as the form's text areas take them: key=value, one a line."""
    return "\n".join(f"{key}={value}" for key, value in tags.items() if key not in skip)


def form_from_run(*, run: Run, link_tag: str) -> tuple[QueryDict, dict[str, Any]]:
    """The submit form filled in as ``run`` was submitted (clone and edit, or a refused rerun shown
    again): (the inputs, the raw parameter values); ``link_tag=<run id>`` is added to its tags."""
    shown = QueryDict(mutable=True)
    shown.update({"project": str(run.project_id), "template": run.template.slug, "priority": run.priority,
                  "from": str(run.pk), **{text.name: getattr(run, text.name) for text in TEXT_INPUTS}})
    tags = dict(run.tags or {})
    for key in TAG_FIELDS:
        shown[f"tag_{key}"] = str(tags.get(key, ""))
    others = {key: value for key, value in tags.items() if key not in (*TAG_FIELDS, *LINK_TAGS)}
    shown["extra_tags"] = tags_text({**others, link_tag: run.pk}, skip=("owner",))
    shown[TEMPLATE_VERSION] = f"{run.template.slug}@{run.template.version}"
    resources = run_resources(run=run)
    for name in RESOURCE_FIELDS:
        if name in resources:
            value = resources[name]
            shown[f"res_{name}"] = f"{value:g}" if isinstance(value, float) else str(value)
    shown["res_preemptible"] = "true" if resources["preemptible"] else "false"
    if resources.get("pools"):
        shown["res_pools"] = ",".join(resources["pools"])
    if run.init_checkpoint is not None:
        shown["init_run"] = str(run.init_checkpoint.run_id)
    if run.code_snapshot is not None:
        shown["code_snapshot"] = run.code_snapshot.sha256
    shown.setlist("secrets", list(run.secrets or []))
    values: dict[str, Any] = {}
    params = run.params or {}
    for f in param_fields(template=run.template):
        if f.name in params:
            values[f.name] = _display(f.kind, params[f.name])
            if f.kind != "boolean":
                shown[f.input_name] = str(values[f.name])
            elif params[f.name]:
                shown[f.input_name] = "on"
    return shown, values
