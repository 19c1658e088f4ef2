"""Submitting runs: validate everything, then queue in one transaction (or queue nothing).

Every problem with the request is collected and raised together as one ServiceError whose
``fields`` name each bad field ("params.lr", "resources.devices_per_node", "tags.task"), so the
API and the form can show all of them at once. Admission checks registered by other apps
(billing, quotas) run last, inside the transaction, with the project row locked so two
concurrent submissions to one project see each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record, snapshot
from apps.core.errors import Forbidden, ServiceError
from apps.core.text import is_id
from apps.jobtemplates.models import JobTemplate, LaunchMode, TemplateKind
from apps.jobtemplates.selectors import template_get
from apps.nodes.models import NodePool, NodeState
from apps.runs.models import Checkpoint, CodeSnapshot, Priority, Run, RunStatus
from apps.runs.selectors import run_list
from apps.runs.services.params import params_resolve
from apps.runs.services.placement import request_scheduling_pass
from apps.runs.services.sweep import sweep_points
from apps.runs.services.transitions import run_new
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role

# Other apps append checks here in their AppConfig.ready(). Each is called as
# ``check(run=<unsaved Run>, project=<locked Project>, user=<user>)`` inside the submit
# transaction and raises a ServiceError to refuse; for a sweep it is called once per child.
ADMISSION_CHECKS: list[Callable[..., None]] = []

REQUIRED_TAGS = ("task", "dataset", "candidate", "family")
CANDIDATE_VALUES = ("baseline", "candidate", "promoted", "rejected")
TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
TAG_VALUE_MAX = 200
MAX_TAGS = 32
NAME_MAX = 200
RESOURCE_KEYS = ("pool", "nodes", "devices_per_node", "max_runtime_s", "preemptible")
RUN_AUDIT_FIELDS = ["project", "template", "name", "priority", "pool", "nodes", "devices_per_node", "status", "parent", "family"]
INIT_KINDS = (TemplateKind.FINETUNE, TemplateKind.EVALUATE)


class Errors:
    """Collects field errors so one response names every bad field."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.fields.setdefault(field, []).append(message)

    def merge(self, err: ServiceError, rename: Callable[[str], str] = lambda f: f) -> None:
        if not err.fields:
            self.add("non_field_errors", err.message)
        for field, messages in err.fields.items():
            for message in messages:
                self.add(rename(field), message)

    def merge_fields(self, other: Errors) -> None:
        for field, messages in other.fields.items():
            for message in messages:
                self.add(field, message)

    def raise_if_any(self) -> None:
        if self.fields:
            summary = "; ".join(f"{field}: {msgs[0]}" for field, msgs in list(self.fields.items())[:5])
            raise ServiceError(f"Invalid submission: {summary}", fields=self.fields)


@dataclass(frozen=True)
class Resources:
    pool: NodePool
    nodes: int
    devices_per_node: int
    max_runtime_s: int
    preemptible: bool


def _int_in(errors: Errors, field: str, value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(field, f"must be an integer (got {value!r})")
        return None
    if value < low:
        errors.add(field, f"must be ≥ {low} (got {value})")
        return None
    if value > high:
        errors.add(field, f"must be ≤ {high} (got {value})")
        return None
    return value


def resources_resolve(*, template: JobTemplate, resources: dict[str, Any] | None, errors: Errors) -> Resources | None:
    """The template's resource defaults overridden by ``resources``, checked against its limits."""
    defaults = template.resources or {}
    requested = resources or {}
    if not isinstance(requested, dict):
        errors.add("resources", "must be an object")
        return None
    for key in requested:
        if key not in RESOURCE_KEYS:
            errors.add(f"resources.{key}", f"unknown resource (allowed: {', '.join(RESOURCE_KEYS)})")
    merged = {**defaults, **{k: v for k, v in requested.items() if k in RESOURCE_KEYS}}
    pool_name = merged.get("pool", "")
    pool = NodePool.objects.filter(name=pool_name).first() if isinstance(pool_name, str) else None
    allowed_pools = defaults.get("pools")
    if pool is None:
        errors.add("resources.pool", f"no such pool {pool_name!r}")
    elif allowed_pools and pool.name not in allowed_pools:
        errors.add("resources.pool", f"this template runs only in {', '.join(allowed_pools)} (got {pool.name!r})")
    nodes = _int_in(errors, "resources.nodes", merged.get("nodes", 1), 1, int(defaults.get("max_nodes", 1)))
    devices = _int_in(errors, "resources.devices_per_node", merged.get("devices_per_node", 1), 1,
                      int(defaults.get("max_devices_per_node", 1)))
    runtime = _int_in(errors, "resources.max_runtime_s", merged.get("max_runtime_s", 3600), 10,
                      int(defaults.get("max_runtime_limit_s", 24 * 3600)))
    preemptible = merged.get("preemptible", True)
    if not isinstance(preemptible, bool):
        errors.add("resources.preemptible", f"must be true or false (got {preemptible!r})")
    if pool is not None and devices is not None:
        # Only hardware that exists can refuse: an empty pool may gain nodes while the run queues.
        largest = max((n.devices.count() for n in pool.nodes.exclude(state=NodeState.OFFLINE)), default=None)
        if largest is not None and devices > largest:
            errors.add("resources.devices_per_node",
                       f"must be ≤ {largest}, the most devices of any node in pool {pool.name} (got {devices})")
    if pool is None or nodes is None or devices is None or runtime is None or not isinstance(preemptible, bool):
        return None
    return Resources(pool=pool, nodes=nodes, devices_per_node=devices, max_runtime_s=runtime, preemptible=preemptible)


def world_size_of(resources: Resources | None, template: JobTemplate) -> int | None:
    """How many ranks the run gets: one per device, or one per node for a per_node template
    (None while its resources are invalid)."""
    if resources is None:
        return None
    return resources.nodes * (1 if template.launch == LaunchMode.PER_NODE else resources.devices_per_node)


def tags_resolve(*, tags: dict[str, Any] | None, user: AnyUser, errors: Errors) -> dict[str, str]:
    raw = tags or {}
    if not isinstance(raw, dict):
        errors.add("tags", "must be an object of key: value strings")
        return {}
    if len(raw) > MAX_TAGS:
        errors.add("tags", f"at most {MAX_TAGS} tags (got {len(raw)})")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if key == "owner":
            continue  # always the submitter, whatever was sent
        if not isinstance(key, str) or not TAG_KEY_RE.match(key):
            errors.add(f"tags.{key}", "key must be 1-63 characters: a lowercase letter, then letters, digits, '_', '.', '-'")
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.add(f"tags.{key}", f"value must be a string (got {value!r})")
            continue
        text = str(value).strip()
        if len(text) > TAG_VALUE_MAX:
            errors.add(f"tags.{key}", f"value must be at most {TAG_VALUE_MAX} characters (got {len(text)})")
            continue
        out[key] = text
    for key in REQUIRED_TAGS:
        if not out.get(key):
            errors.add(f"tags.{key}", "this tag is required")
    if out.get("candidate") and out["candidate"] not in CANDIDATE_VALUES:
        errors.add("tags.candidate", f"must be one of {', '.join(CANDIDATE_VALUES)} (got {out['candidate']!r})")
    out["owner"] = user.get_username()
    return out


def priority_resolve(*, priority: Any, errors: Errors) -> str:
    value = priority or Priority.NORMAL
    if value not in Priority.values:
        errors.add("priority", f"must be one of {', '.join(Priority.values)} (got {value!r})")
        return Priority.NORMAL
    return str(value)


def init_checkpoint_resolve(*, user: AnyUser, init_run: Any, init_checkpoint: Any, errors: Errors) -> Checkpoint | None:
    """The checkpoint a fine-tune or evaluation starts from: a given one, or a run's latest."""
    source = None
    if init_run not in (None, ""):
        if isinstance(init_run, bool) or not is_id(str(init_run)):
            errors.add("init_run", f"must be a run id (got {init_run!r})")
            return None
        source = run_list(user=user).filter(pk=int(init_run)).first()
        if source is None:
            errors.add("init_run", f"no such run {init_run}")
            return None
    visible = Checkpoint.objects.filter(run__in=run_list(user=user), deleted_at__isnull=True).select_related("run")
    if init_checkpoint not in (None, ""):
        if isinstance(init_checkpoint, bool) or not is_id(str(init_checkpoint)):
            errors.add("init_checkpoint", f"must be a checkpoint id (got {init_checkpoint!r})")
            return None
        checkpoint = visible.filter(pk=int(init_checkpoint)).first()
        if checkpoint is None or (source is not None and checkpoint.run_id != source.pk):
            errors.add("init_checkpoint", f"no such checkpoint {init_checkpoint}" + (f" of run {source.pk}" if source else ""))
            return None
        return checkpoint
    if source is None:
        return None
    checkpoint = visible.filter(run=source).order_by("-step", "-pk").first()
    if checkpoint is None:
        errors.add("init_run", f"run {source.pk} has no checkpoint to start from")
    return checkpoint


def secrets_resolve(*, secrets: Any, errors: Errors) -> list[str]:
    """Shape only (a list of names); whether each exists is the vault's admission check."""
    if secrets in (None, ""):
        return []
    if not isinstance(secrets, list) or not all(isinstance(n, str) for n in secrets):
        errors.add("secrets", "must be a list of secret names")
        return []
    return sorted(set(secrets))


def _entrypoint(template: JobTemplate, params: dict[str, Any]) -> str:
    if template.kind == TemplateKind.CUSTOM:
        return str(params.get("command", "")).strip()
    return template.entrypoint


def _total_steps(template: JobTemplate, params: dict[str, Any]) -> int | None:
    value = params.get(template.total_steps_param) if template.total_steps_param else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _build_run(*, project: Project, template: JobTemplate, params: dict[str, Any], tags: dict[str, str], priority: str,
               resources: Resources, user: AnyUser, name: str, now: Any, init_checkpoint: Checkpoint | None,
               code_snapshot: CodeSnapshot | None, parent: Run | None = None, secrets: list[str] | None = None,
               status: str = RunStatus.QUEUED) -> Run:
    return run_new(
        status=status,
        project=project,
        template=template,
        submitted_by=user if isinstance(user, AbstractBaseUser) else None,  # type: ignore[misc]
        name=name,
        params=params,
        tags=tags,
        family=tags.get("family", ""),
        priority=priority,
        preemptible=resources.preemptible,
        pool=resources.pool,
        nodes=resources.nodes,
        devices_per_node=resources.devices_per_node,
        max_runtime_s=resources.max_runtime_s,
        grace_period_s=template.grace_period_s,
        max_restarts=template.max_restarts,
        entrypoint=_entrypoint(template, params),
        checkpoint_policy=dict(template.checkpoint_policy or {}),
        queued_at=now,
        parent=parent,
        init_checkpoint=init_checkpoint,
        code_snapshot=code_snapshot,
        total_steps=_total_steps(template, params),
        secrets=list(secrets or []),
    )


def _admit_and_save(run: Run, *, project: Project, user: AnyUser) -> Run:
    for check in ADMISSION_CHECKS:
        check(run=run, project=project, user=user)
    run.save()
    audit_record(action="run.submit", target=run, team_id=project.team_id, after=snapshot(run, RUN_AUDIT_FIELDS))
    return run


def submitter_check(*, user: AnyUser, project: Project) -> None:
    """Forbidden (403) below engineer of the project's team: who may submit, or ask what a submission would do."""
    if not has_role(user=user, team_id=project.team_id, at_least="engineer"):
        raise Forbidden("Only engineers of the project's team may submit runs.")


def run_submit(
    *,
    project: Project,
    template: JobTemplate,
    params: dict[str, Any] | None,
    tags: dict[str, Any] | None,
    priority: str | None,
    resources: dict[str, Any] | None,
    user: AnyUser,
    name: str = "",
    init_run: int | str | None = None,
    init_checkpoint: int | str | None = None,
    code_snapshot: CodeSnapshot | None = None,
    secrets: Any = None,
) -> Run:
    """Validates a submission and queues it (a sweep queues one child per point under a parent).

    Raises Forbidden for a role below engineer and ServiceError (400) naming every bad field;
    on any error nothing is written.
    """
    submitter_check(user=user, project=project)
    errors = Errors()
    if not template.published:
        errors.add("template", f"{template} is not published")
    if not isinstance(name, str) or len(name) > NAME_MAX:
        errors.add("name", f"must be at most {NAME_MAX} characters")
        name = ""
    clean_tags = tags_resolve(tags=tags, user=user, errors=errors)
    clean_priority = priority_resolve(priority=priority, errors=errors)
    raw_params = dict(params or {}) if isinstance(params, dict) else None
    if raw_params is None:
        errors.add("params", "must be an object")
        raw_params = {}
    properties = (template.param_schema or {}).get("properties", {})
    # init_run/init_checkpoint may come inside params when the recipe's schema does not own them.
    for key in ("init_run", "init_checkpoint"):
        if key in raw_params and key not in properties:
            value = raw_params.pop(key)
            if key == "init_run" and init_run in (None, ""):
                init_run = value
            if key == "init_checkpoint" and init_checkpoint in (None, ""):
                init_checkpoint = value
    checkpoint = init_checkpoint_resolve(user=user, init_run=init_run, init_checkpoint=init_checkpoint, errors=errors)
    # Secret names may come inside params too; the vault's admission check verifies they exist.
    if "secrets" in raw_params and "secrets" not in properties and secrets in (None, []):
        secrets = raw_params.pop("secrets")
    secret_names = secrets_resolve(secrets=secrets, errors=errors)

    if template.kind == TemplateKind.SWEEP:
        return _sweep_submit(project=project, template=template, raw_params=raw_params, tags=clean_tags, priority=clean_priority,
                             resources=resources, user=user, name=name, checkpoint=checkpoint, code_snapshot=code_snapshot,
                             errors=errors, secrets=secret_names)

    # Resources first: the recipe's rules (batch_size over world size × grad_accum) need the world size asked for.
    resource_errors = Errors()
    clean_resources = resources_resolve(template=template, resources=resources, errors=resource_errors)
    clean_params: dict[str, Any] = {}
    try:
        clean_params = params_resolve(schema=template.param_schema or {}, params=raw_params,
                                      world_size=world_size_of(clean_resources, template))
    except ServiceError as err:
        errors.merge(err)
    _check_kind_inputs(template=template, checkpoint=checkpoint, init_given=init_run not in (None, "") or
                       init_checkpoint not in (None, ""), code_snapshot=code_snapshot, project=project, errors=errors)
    errors.merge_fields(resource_errors)
    errors.raise_if_any()
    assert clean_resources is not None
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        run = _build_run(project=locked, template=template, params=clean_params, tags=clean_tags, priority=clean_priority,
                         resources=clean_resources, user=user, name=name, now=timezone.now(), init_checkpoint=checkpoint,
                         code_snapshot=code_snapshot, secrets=secret_names)
        _admit_and_save(run, project=locked, user=user)
        request_scheduling_pass()
    return run


@dataclass(frozen=True)
class Checked:
    """A submission's priority, resources and params as checked without queuing anything."""

    priority: str
    resources: Resources | None
    params: dict[str, Any]


def submission_check(*, user: AnyUser, template: JobTemplate, params: Any, priority: Any, resources: Any, errors: Errors,
                     extras: dict[str, Any] | None = None) -> Checked:
    """What a submission checks of its priority, resources and params (at the world size it asks
    for), and of `extras` (name, tags, init_run, init_checkpoint) when given, adding to `errors`
    and saving nothing: for the forecast, and for the form when its own errors stop the submission."""
    if extras is not None:
        submission_extras_check(user=user, template=template, name=extras.get("name", ""), tags=extras.get("tags"),
                                init_run=extras.get("init_run"), init_checkpoint=extras.get("init_checkpoint"), errors=errors)
    clean_priority = priority_resolve(priority=priority, errors=errors)
    # Resources first: the recipe's rules on params (batch_size over the ranks) need the world size.
    clean_resources = resources_resolve(template=template, resources=resources, errors=errors)
    clean_params: dict[str, Any] = {}
    if not isinstance(params, dict):
        errors.add("params", "must be an object")
    else:
        try:
            clean_params = params_resolve(schema=template.param_schema or {}, params=params,
                                          world_size=world_size_of(clean_resources, template))
        except ServiceError as err:
            errors.merge(err)
    return Checked(priority=clean_priority, resources=clean_resources, params=clean_params)


def submission_extras_check(*, user: AnyUser, template: JobTemplate, name: Any, tags: Any, init_run: Any,
                            init_checkpoint: Any, errors: Errors) -> None:
    """What a submission checks besides what decides its place in line (name, tags, where a
    fine-tune starts), for a forecast that should refuse what the submission would."""
    if not isinstance(name, str) or len(name) > NAME_MAX:
        errors.add("name", f"must be at most {NAME_MAX} characters")
    tags_resolve(tags=tags, user=user, errors=errors)
    checkpoint = init_checkpoint_resolve(user=user, init_run=init_run, init_checkpoint=init_checkpoint, errors=errors)
    # The code snapshot is not asked for: a dry run has not uploaded its code yet.
    _check_kind_inputs(template=template, checkpoint=checkpoint, code_snapshot=None, project=None, errors=errors,
                       init_given=init_run not in (None, "") or init_checkpoint not in (None, ""))


def _check_kind_inputs(*, template: JobTemplate, checkpoint: Checkpoint | None, init_given: bool,
                       code_snapshot: CodeSnapshot | None, project: Project | None, errors: Errors) -> None:
    if template.kind in INIT_KINDS and checkpoint is None and not init_given:
        errors.add("init_run", f"required for {template.get_kind_display().lower()} templates: the run (or checkpoint) to start from")
    if project is None:
        return
    if template.kind == TemplateKind.CUSTOM and code_snapshot is None:
        errors.add("code_snapshot", "required for the custom template: upload a .tar.gz to /api/v1/code-snapshots/ first")
    if code_snapshot is not None and code_snapshot.project_id != project.pk:
        errors.add("code_snapshot", "no such snapshot in this project")


def _sweep_submit(*, project: Project, template: JobTemplate, raw_params: dict[str, Any], tags: dict[str, str], priority: str,
                  resources: dict[str, Any] | None, user: AnyUser, name: str, checkpoint: Checkpoint | None,
                  code_snapshot: CodeSnapshot | None, errors: Errors, secrets: list[str] | None = None) -> Run:
    """A parent run (the family's controller: it holds no devices and is never scheduled) plus
    one queued child per point of the space."""
    sweep: dict[str, Any] = {}
    try:
        sweep = params_resolve(schema=template.param_schema or {}, params=raw_params)
    except ServiceError as err:
        errors.merge(err)
    child_template: JobTemplate | None = None
    if isinstance(sweep.get("template"), str):
        try:
            child_template = template_get(user=user, slug=sweep["template"])
        except ServiceError:
            errors.add("params.template", f"no such template {sweep['template']!r}")
        if child_template is not None and (not child_template.published or child_template.kind == TemplateKind.SWEEP):
            errors.add("params.template", f"{child_template.slug} cannot be swept")
            child_template = None
    points: list[dict[str, Any]] = []
    if sweep and child_template is not None:
        try:
            points = sweep_points(strategy=sweep["strategy"], space=sweep["space"], max_runs=sweep["max_runs"], seed=sweep["seed"])
        except ServiceError as err:
            errors.merge(err)
    resource_errors = Errors()
    clean_resources = resources_resolve(template=child_template, resources=resources, errors=resource_errors) if child_template else None
    child_params: list[dict[str, Any]] = []
    if child_template is not None:
        base = sweep.get("params") or {}
        space_keys = set(sweep.get("space") or {})

        def rename(field: str) -> str:
            key = field.removeprefix("params.").split(".")[0]
            return f"params.space.{key}" if key in space_keys else f"params.params.{key}"

        for point in points:
            try:
                child_params.append(params_resolve(schema=child_template.param_schema or {}, params={**base, **point},
                                                   world_size=world_size_of(clean_resources, child_template)))
            except ServiceError as err:
                errors.merge(err, rename)
                break
        _check_kind_inputs(template=child_template, checkpoint=checkpoint, init_given=checkpoint is not None,
                           code_snapshot=code_snapshot, project=project, errors=errors)
    errors.merge_fields(resource_errors)
    errors.raise_if_any()
    assert child_template is not None and clean_resources is not None
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        now = timezone.now()
        parent = _build_run(project=locked, template=template, params=sweep, tags=tags, priority=priority, resources=clean_resources,
                            user=user, name=name or f"sweep {tags['family']}", now=now, init_checkpoint=None, code_snapshot=None,
                            status=RunStatus.RUNNING)
        # The controller needs no devices and must never be placed: it is running from the start
        # and run_family_refresh finishes it when its last child ends.
        parent.started_at, parent.devices_per_node, parent.nodes = now, 0, 1
        parent.total_steps, parent.max_restarts = len(child_params), 0
        parent.save()
        audit_record(action="run.submit", target=parent, team_id=locked.team_id, after=snapshot(parent, RUN_AUDIT_FIELDS))
        for index, params in enumerate(child_params, start=1):
            child = _build_run(project=locked, template=child_template, params=params, tags=dict(tags), priority=priority,
                               resources=clean_resources, user=user, name=f"{parent.name} #{index}", now=now,
                               init_checkpoint=checkpoint, code_snapshot=code_snapshot, parent=parent, secrets=secrets)
            _admit_and_save(child, project=locked, user=user)
        request_scheduling_pass()
    return parent
