"""A run submission: the one value the API, the form, the forecast, sweeps and the CLI build
(`submission_from_data`), and the one function that checks it (`submission_validate`).

Validation writes nothing. It raises at once for a project, template or code snapshot the user
cannot use (400 naming that field) and Forbidden below engineer; every other problem is
collected into one ServiceError whose ``fields`` name each bad field ("params.lr",
"resources.devices_per_node", "tags.task"), so callers can show all of them at once.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from apps.core.errors import FieldError, Forbidden, NotFound, ServiceError
from apps.core.text import is_id
from apps.jobtemplates.models import JobTemplate, LaunchMode, TemplateKind
from apps.jobtemplates.selectors import template_get
from apps.jobtemplates.services import image_for_submission
from apps.nodes.models import NodePool, NodeState
from apps.runs.models import Checkpoint, CodeSnapshot, Priority, Run, RunStatus
from apps.runs.selectors import run_list
from apps.runs.services.params import params_resolve
from apps.runs.services.sweep import sweep_points
from apps.runs.services.transitions import run_new
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role, project_by_ref_or_error

REQUIRED_TAGS = ("task", "dataset", "candidate", "family")
CANDIDATE_VALUES = ("baseline", "candidate", "promoted", "rejected")
TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
TAG_VALUE_MAX = 200
MAX_TAGS = 32
NAME_MAX = 200
NOTES_MAX = 2000
RESOURCE_KEYS = ("pool", "pools", "nodes", "devices_per_node", "max_runtime_s", "preemptible", "memory_gib_per_device", "cpus_per_device")
GIB = 2**30
PER_DEVICE_CEILING = 2**20
INIT_KINDS = (TemplateKind.FINETUNE, TemplateKind.EVALUATE)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Other apps append checks here in their AppConfig.ready() (as apps.runs.services.submit's
# ADMISSION_CHECKS, the same list). Each is called as ``check(run=<unsaved Run>,
# project=<Project>, user=<user>)`` inside a transaction and raises a ServiceError to refuse;
# for a sweep it is called once per child.
ADMISSION_CHECKS: list[Callable[..., None]] = []
# Keys a recipe's schema may leave to the submission: sent inside params, they are taken as these fields.
PARAMS_OVERFLOW = ("init_run", "init_checkpoint", "secrets")


@dataclass(frozen=True)
class TextInput:
    """A free-text field of a submission. The API, the form and the run's detail take each one as
    declared here; the run has a column of the same name."""

    name: str
    label: str
    max_length: int
    help: str = ""
    multiline: bool = False


TEXT_INPUTS = (
    TextInput("name", "Name", NAME_MAX),
    TextInput("notes", "Notes", NOTES_MAX, "Free text shown on the run's page: what this run tries, why.", multiline=True),
)


@dataclass(frozen=True)
class Submission:
    """A run submission as sent, unchecked. ``project`` is an id, 'team/slug' or a Project;
    ``template`` a slug or a JobTemplate; ``code_snapshot`` a sha256, an id or a CodeSnapshot.
    ``tags`` is None when none were sent (a forecast then checks only the place in line)."""

    project: Any
    template: Any
    template_version: Any = None
    name: Any = ""
    notes: Any = ""
    params: Any = field(default_factory=dict)
    tags: Any = None
    priority: Any = None
    resources: Any = field(default_factory=dict)
    init_run: Any = None
    init_checkpoint: Any = None
    code_snapshot: Any = None
    secrets: Any = None
    # A container image (name or name@digest): only the template's own approved image is accepted.
    image: Any = None


SUBMISSION_FIELDS = tuple(f.name for f in fields(Submission))


def submission_from_data(data: Mapping[str, Any]) -> Submission:
    """The submission in ``data`` (an API body as its serializer read it, the form's values, the
    CLI's body): its keys that name Submission fields; any other key is not the submission's."""
    return Submission(**{name: data[name] for name in SUBMISSION_FIELDS if name in data})


class Check(enum.Enum):
    """How much of a submission `submission_validate` checks."""

    # Everything the submission is refused for: what run_submit queues.
    SUBMISSION = "submission"
    # A forecast with tags (`trainyard submit --dry-run`): all of it but the code snapshot, which a
    # dry run has not uploaded yet. A forecast is of one run: a sweep is refused.
    DRY_RUN = "dry_run"
    # A forecast without tags (the submit page asking while the form is half filled): only what
    # decides the place in line (priority, resources, params).
    PLACE = "place"


class Errors:
    """Collects field errors so one response names every bad field."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.fields.setdefault(field, []).append(message)

    def merge(self, err: ServiceError, rename: Callable[[str], str] = lambda f: f) -> None:
        if not err.fields:
            self.add("non_field_errors", err.message)
        for field_name, messages in err.fields.items():
            for message in messages:
                self.add(rename(field_name), message)

    def merge_fields(self, other: Errors) -> None:
        for field_name, messages in other.fields.items():
            for message in messages:
                self.add(field_name, message)

    def raise_if_any(self) -> None:
        if self.fields:
            # A refusal of the whole submission reads as itself, never under a raw "non_field_errors:" key.
            summary = "; ".join(msgs[0] if name == "non_field_errors" else f"{name}: {msgs[0]}"
                                for name, msgs in list(self.fields.items())[:5])
            raise ServiceError(f"Invalid submission: {summary}", fields=self.fields)


@dataclass(frozen=True)
class Resources:
    pool: NodePool
    nodes: int
    devices_per_node: int
    max_runtime_s: int
    preemptible: bool
    # Asked per device (0: none); the template's `memory_gib_per_device` / `cpus_per_device`
    # unless overridden, within its `max_memory_gib_per_device` / `max_cpus_per_device`.
    memory_bytes_per_device: int = 0
    cpus_per_device: float = 0.0
    # Every acceptable pool (`pool` first) of a run that may use several; empty: `pool` only.
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's trials: the template each runs and each one's params (defaults filled in)."""

    template: JobTemplate
    trials: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ValidSubmission:
    """A checked submission, its references resolved. For a sweep, ``params`` are the sweep's own
    and ``resources`` those of each trial."""

    project: Project
    template: JobTemplate
    texts: Mapping[str, str]
    params: dict[str, Any]
    tags: Mapping[str, str]
    priority: str
    resources: Resources
    init_checkpoint: Checkpoint | None = None
    code_snapshot: CodeSnapshot | None = None
    secrets: tuple[str, ...] = ()
    sweep: SweepPlan | None = None

    @property
    def name(self) -> str:
        return self.texts.get("name", "")

    def run_fields(self) -> dict[str, Any]:
        """The run's columns that come straight from the submission."""
        tags = dict(self.tags)
        return {
            **self.texts, "tags": tags, "family": tags.get("family", ""), "priority": self.priority,
            "preemptible": self.resources.preemptible, "pool": self.resources.pool, "pools": list(self.resources.pools),
            "nodes": self.resources.nodes,
            "devices_per_node": self.resources.devices_per_node, "max_runtime_s": self.resources.max_runtime_s,
            "memory_bytes_per_device": self.resources.memory_bytes_per_device,
            "cpus_per_device": self.resources.cpus_per_device,
            "init_checkpoint": self.init_checkpoint, "code_snapshot": self.code_snapshot, "secrets": list(self.secrets),
        }


def submission_validate(*, submission: Submission, user: AnyUser, check: Check = Check.SUBMISSION) -> ValidSubmission:
    """The submission checked (as much as ``check`` says) and resolved; see the module docstring."""
    project = _project_resolve(user=user, ref=submission.project)
    template = _template_resolve(user=user, ref=submission.template, version=submission.template_version)
    snapshot = code_snapshot_resolve(project=project, ref=submission.code_snapshot) if check is Check.SUBMISSION else None
    submitter_check(user=user, project=project)
    errors = Errors()
    everything = check is not Check.PLACE
    sweep = template.kind == TemplateKind.SWEEP
    if check is not Check.SUBMISSION and sweep:
        errors.add("template", "a sweep queues one run per point: ask for a forecast of one point's template")
    if everything and not template.published:
        errors.add("template", f"{template} is not published")
    texts = _texts_resolve(submission=submission, errors=errors) if everything else {}
    tags = tags_resolve(tags=submission.tags, user=user, errors=errors) if everything else {}
    priority = priority_resolve(priority=submission.priority, errors=errors)
    raw_params, overflow = _params_split(template=template, submission=submission, errors=errors)
    checkpoint, secrets = None, []
    if everything:
        checkpoint = init_checkpoint_resolve(user=user, init_run=overflow["init_run"],
                                             init_checkpoint=overflow["init_checkpoint"], errors=errors)
        secrets = secrets_resolve(secrets=overflow["secrets"], errors=errors)
        try:
            image_for_submission(template=template, requested=submission.image)
        except FieldError as err:
            errors.merge(err)
    plan = None
    if sweep and check is Check.SUBMISSION:
        params, resources, plan = _sweep_resolve(user=user, template=template, params=raw_params, resources=submission.resources,
                                                 errors=errors)
        kind_template = plan.template if plan is not None else None
    else:
        params, resources = _run_resolve(template=template, params=raw_params, resources=submission.resources, errors=errors)
        kind_template = template
    if everything and kind_template is not None:
        init_given = overflow["init_run"] not in (None, "") or overflow["init_checkpoint"] not in (None, "")
        _check_kind_inputs(template=kind_template, checkpoint=checkpoint, init_given=init_given, code_snapshot=snapshot,
                           project=project if check is Check.SUBMISSION else None, errors=errors)
    errors.raise_if_any()
    assert resources is not None
    valid = ValidSubmission(project=project, template=template, texts=texts, params=params, tags=tags, priority=priority,
                            resources=resources, init_checkpoint=checkpoint, code_snapshot=snapshot, secrets=tuple(secrets),
                            sweep=plan)
    if check is Check.DRY_RUN:
        submission_admission_check(valid=valid, user=user)
    return valid


def _entrypoint(template: JobTemplate, params: dict[str, Any]) -> str:
    if template.kind == TemplateKind.CUSTOM:
        return str(params.get("command", "")).strip()
    return template.entrypoint


def _total_steps(template: JobTemplate, params: dict[str, Any]) -> int | None:
    value = params.get(template.total_steps_param) if template.total_steps_param else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def run_build(valid: ValidSubmission, *, project: Project, user: AnyUser, now: datetime, template: JobTemplate | None = None,
               params: dict[str, Any] | None = None, **changes: Any) -> Run:
    """An unsaved run of the submission (what run_submit saves, what a dry run's admission checks
    see); a sweep's parent and children give their own template, params and `changes` (name, parent, status...)."""
    template = template or valid.template
    params = valid.params if params is None else params
    fields: dict[str, Any] = {
        **valid.run_fields(),
        "status": RunStatus.QUEUED,
        "project": project,
        "template": template,
        "params": params,
        "submitted_by": user if isinstance(user, AbstractBaseUser) else None,
        "grace_period_s": template.grace_period_s,
        "max_restarts": template.max_restarts,
        "entrypoint": _entrypoint(template, params),
        "checkpoint_policy": dict(template.checkpoint_policy or {}),
        "queued_at": now,
        "total_steps": _total_steps(template, params),
    }
    return run_new(**{**fields, **changes})


def submission_admission_check(*, valid: ValidSubmission, user: AnyUser) -> None:
    """Raises what run_submit's admission checks (budget, secrets) would for this submission,
    writing nothing: a dry run refuses exactly what the submission would. The checks lock rows
    as in a submission, so they run in a transaction of their own, held only while they run."""
    with transaction.atomic():
        run = run_build(valid, project=valid.project, user=user, now=timezone.now())
        for check in ADMISSION_CHECKS:
            check(run=run, project=valid.project, user=user)


def submitter_check(*, user: AnyUser, project: Project) -> None:
    """Forbidden (403) below engineer of the project's team: who may submit, or ask what a submission would do."""
    if not has_role(user=user, team_id=project.team_id, at_least="engineer"):
        raise Forbidden("Only engineers of the project's team may submit runs.")


def _project_resolve(*, user: AnyUser, ref: Any) -> Project:
    if isinstance(ref, Project):
        return ref
    return project_by_ref_or_error(user=user, ref=ref)


def _template_resolve(*, user: AnyUser, ref: Any, version: int | None) -> JobTemplate:
    if isinstance(ref, JobTemplate):
        return ref
    try:
        return template_get(user=user, slug=ref, version=version)
    except NotFound as err:
        raise FieldError("template", f"no such template {ref!r}" + (f" version {version}" if version else "")) from err


def code_snapshot_resolve(*, project: Project, ref: Any) -> CodeSnapshot | None:
    """A code snapshot of the project by sha256 or id; a 400 on `code_snapshot` otherwise."""
    if isinstance(ref, CodeSnapshot) or ref is None:
        return ref
    text = str(ref).strip()
    if not text:
        return None
    snapshots = CodeSnapshot.objects.filter(project=project)
    found = snapshots.filter(sha256=text.lower()).first() if SHA256_RE.match(text.lower()) else None
    if found is None and is_id(text):
        found = snapshots.filter(pk=int(text)).first()
    if found is None:
        raise FieldError("code_snapshot", "no such snapshot in this project")
    return found


def _texts_resolve(*, submission: Submission, errors: Errors) -> dict[str, str]:
    texts: dict[str, str] = {}
    for text in TEXT_INPUTS:
        value = getattr(submission, text.name)
        if not isinstance(value, str) or len(value) > text.max_length:
            errors.add(text.name, f"must be at most {text.max_length} characters")
            value = ""
        texts[text.name] = value
    return texts


def _params_split(*, template: JobTemplate, submission: Submission, errors: Errors) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the params, the PARAMS_OVERFLOW fields): those sent inside params count where the recipe's
    schema does not own the key and the field itself was not sent."""
    overflow = {key: getattr(submission, key) for key in PARAMS_OVERFLOW}
    if not isinstance(submission.params, dict):
        errors.add("params", "must be an object")
        return {}, overflow
    params = dict(submission.params)
    properties = (template.param_schema or {}).get("properties", {})
    for key in PARAMS_OVERFLOW:
        if key in params and key not in properties:
            value = params.pop(key)
            if overflow[key] in (None, "", []):
                overflow[key] = value
    return params, overflow


def _run_resolve(*, template: JobTemplate, params: dict[str, Any], resources: Any,
                 errors: Errors) -> tuple[dict[str, Any], Resources | None]:
    # Resources first: the recipe's rules on params (batch_size over the ranks) need the world size asked for.
    clean_resources = resources_resolve(template=template, resources=resources, errors=errors)
    clean_params: dict[str, Any] = {}
    try:
        clean_params = params_resolve(schema=template.param_schema or {}, params=params,
                                      world_size=world_size_of(clean_resources, template))
    except ServiceError as err:
        errors.merge(err)
    return clean_params, clean_resources


def _sweep_resolve(*, user: AnyUser, template: JobTemplate, params: dict[str, Any], resources: Any,
                   errors: Errors) -> tuple[dict[str, Any], Resources | None, SweepPlan | None]:
    """(the sweep's own params, each trial's resources, its trials): the trial template's rules
    apply to each point, with errors named in the sweep's terms (params.space.lr, params.params.steps)."""
    sweep: dict[str, Any] = {}
    try:
        sweep = params_resolve(schema=template.param_schema or {}, params=params)
    except ServiceError as err:
        errors.merge(err)
    trial_template = _trial_template(user=user, slug=sweep.get("template"), errors=errors)
    if trial_template is None:
        return sweep, None, None
    points: list[dict[str, Any]] = []
    if sweep:
        try:
            points = sweep_points(strategy=sweep["strategy"], space=sweep["space"], max_runs=sweep["max_runs"], seed=sweep["seed"])
        except ServiceError as err:
            errors.merge(err)
    resource_errors = Errors()
    clean_resources = resources_resolve(template=trial_template, resources=resources, errors=resource_errors)
    base = sweep.get("params") or {}
    space_keys = set(sweep.get("space") or {})

    def rename(field_name: str) -> str:
        key = field_name.removeprefix("params.").split(".")[0]
        return f"params.space.{key}" if key in space_keys else f"params.params.{key}"

    trials: list[dict[str, Any]] = []
    for point in points:
        try:
            trials.append(params_resolve(schema=trial_template.param_schema or {}, params={**base, **point},
                                         world_size=world_size_of(clean_resources, trial_template)))
        except ServiceError as err:
            errors.merge(err, rename)
            break
    errors.merge_fields(resource_errors)
    return sweep, clean_resources, SweepPlan(template=trial_template, trials=tuple(trials))


def _trial_template(*, user: AnyUser, slug: Any, errors: Errors) -> JobTemplate | None:
    if not isinstance(slug, str):
        return None
    try:
        found = template_get(user=user, slug=slug)
    except ServiceError:
        errors.add("params.template", f"no such template {slug!r}")
        return None
    if not found.published or found.kind == TemplateKind.SWEEP:
        errors.add("params.template", f"{found.slug} cannot be swept")
        return None
    return found


def resources_resolve(*, template: JobTemplate, resources: Any, errors: Errors) -> Resources | None:
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
    allowed_pools = defaults.get("pools")
    acceptable = _pools_named(requested.get("pools"), requested.get("pool"), allowed_pools, errors)
    pool_name = acceptable[0].name if acceptable else merged.get("pool", "")
    pool = NodePool.objects.filter(name=pool_name).first() if isinstance(pool_name, str) else None
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
    if len(acceptable) > 1 and devices is not None and nodes is not None:
        fitting = [p for p in acceptable if _largest_node(p) is None or devices <= (_largest_node(p) or 0)]
        if not fitting:
            errors.add("resources.pools", f"a run of {nodes} node(s) × {devices} device(s) fits none of the pools "
                       f"{', '.join(p.name for p in acceptable)}: no node in any of them has {devices} devices")
        elif pool is not None and pool not in fitting:
            pool = fitting[0]  # the default pool is one that can hold it
    elif pool is not None and devices is not None:
        largest = _largest_node(pool)
        if largest is not None and devices > largest:
            errors.add("resources.devices_per_node",
                       f"must be ≤ {largest}, the most devices of any node in pool {pool.name} (got {devices})")
    memory_gib = _per_device_in(errors, "memory_gib_per_device", defaults, merged)
    cpus = _per_device_in(errors, "cpus_per_device", defaults, merged)
    if pool is None or nodes is None or devices is None or runtime is None or not isinstance(preemptible, bool):
        return None
    if memory_gib is None or cpus is None:
        return None
    names = (pool.name, *(p.name for p in acceptable if p != pool)) if len(acceptable) > 1 else ()
    return Resources(pool=pool, nodes=nodes, devices_per_node=devices, max_runtime_s=runtime, preemptible=preemptible,
                     memory_bytes_per_device=round(memory_gib * GIB), cpus_per_device=cpus, pools=names)


def _largest_node(pool: NodePool) -> int | None:
    """The most devices of any node of the pool; None where no hardware can refuse: Slurm judges its
    own, and an empty pool may gain nodes while the run queues."""
    if pool.backend == "slurm":
        return None
    return max((n.devices.count() for n in pool.nodes.exclude(state=NodeState.OFFLINE)), default=None)


def _pools_named(raw: Any, default: Any, allowed: Any, errors: Errors) -> list[NodePool]:
    """The acceptable pools of ``resources.pools`` (``resources.pool``, when given, first); [] when
    none were named or they are bad (each problem added to ``errors`` under resources.pools)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) and p for p in raw):
        errors.add("resources.pools", f"must be a non-empty list of pool names (got {raw!r})")
        return []
    names = list(dict.fromkeys(raw))
    if isinstance(default, str) and default:
        if default not in names:
            errors.add("resources.pools", f"must include resources.pool {default!r} when both are given")
            return []
        names = [default, *(n for n in names if n != default)]
    found = {p.name: p for p in NodePool.objects.filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        errors.add("resources.pools", f"no such pool {', '.join(repr(n) for n in missing)}")
    banned = [n for n in names if allowed and n in found and n not in allowed]
    if banned:
        errors.add("resources.pools", f"this template runs only in {', '.join(allowed)} (got {', '.join(banned)})")
    return [] if missing or banned else [found[n] for n in names]


def _per_device_in(errors: Errors, key: str, defaults: Mapping[str, Any], merged: Mapping[str, Any]) -> float | None:
    """Memory (GiB) or CPU cores per device: the template's default unless overridden, at least 0
    and at most the template's `max_<key>` (without one, its default when it has one)."""
    field_name, value = f"resources.{key}", merged.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors.add(field_name, f"must be a number (got {value!r})")
        return None
    # Without a template limit, still one a node's memory or cores could never reach (and a column can hold).
    limit = defaults.get(f"max_{key}", defaults.get(key) or PER_DEVICE_CEILING)
    if value < 0:
        errors.add(field_name, f"must be ≥ 0 (got {value})")
        return None
    if value > float(limit):
        which = f", this template's limit (max_{key})" if limit != PER_DEVICE_CEILING else ""
        errors.add(field_name, f"must be ≤ {limit}{which} (got {value})")
        return None
    return float(value)


def _int_in(errors: Errors, field_name: str, value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(field_name, f"must be an integer (got {value!r})")
        return None
    if value < low:
        errors.add(field_name, f"must be ≥ {low} (got {value})")
        return None
    if value > high:
        errors.add(field_name, f"must be ≤ {high} (got {value})")
        return None
    return value


def world_size_of(resources: Resources | None, template: JobTemplate) -> int | None:
    """How many ranks the run gets: one per device, or one per node for a per_node template
    (None while its resources are invalid)."""
    if resources is None:
        return None
    return resources.nodes * (1 if template.launch == LaunchMode.PER_NODE else resources.devices_per_node)


def tags_resolve(*, tags: Any, user: AnyUser, errors: Errors) -> dict[str, str]:
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


def _check_kind_inputs(*, template: JobTemplate, checkpoint: Checkpoint | None, init_given: bool,
                       code_snapshot: CodeSnapshot | None, project: Project | None, errors: Errors) -> None:
    """What the template's kind needs: a start for a fine-tune or evaluation; for the custom
    template, code (checked only with ``project``: a dry run has not uploaded its code yet)."""
    if template.kind in INIT_KINDS and checkpoint is None and not init_given:
        errors.add("init_run", f"required for {template.get_kind_display().lower()} templates: the run (or checkpoint) to start from")
    if project is None:
        return
    if template.kind == TemplateKind.CUSTOM and code_snapshot is None:
        errors.add("code_snapshot", "required for the custom template: upload a .tar.gz to /api/v1/code-snapshots/ first")
    if code_snapshot is not None and code_snapshot.project_id != project.pk:
        errors.add("code_snapshot", "no such snapshot in this project")
