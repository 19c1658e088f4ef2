"""Writes for the MLflow API: experiments, tracked-only runs, and what they log.

A run created here is tracked only (``Run.tracked_only``): born running, holding no devices, in
the ``tracked`` pool at no price, of the unpublished template ``mlflow-tracked``; the scheduler,
billing and the node sweeps never act on it. Params and tags go to the run's ``params`` and
``tags``, metrics through apps.tracking's ingest, which keeps one point per key and step: the
value with the latest timestamp (on a tie, the last logged). MLflow keeps every value logged at a
step (``log_metric`` without a step logs step 0), so the others go to ``SupersededPoint`` and
metrics/get-history returns them all; no value is dropped, only exact repeats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.jobtemplates.models import JobTemplate
from apps.mlflow_api.errors import MlflowError, invalid
from apps.mlflow_api.models import DatasetInput, DeletedRun, SupersededPoint
from apps.nodes.models import NodePool
from apps.runs.models import Run, RunStatus
from apps.runs.services.transitions import run_new, run_transition
from apps.tenants.models import Project, Role, Team
from apps.tenants.selectors import AnyUser, has_role, project_list
from apps.tenants.services import project_create
from apps.tracking.models import MetricPoint
from apps.tracking.services import KEY_PATTERN, MAX_KEY_LENGTH, MAX_STEP, PointRow, metric_points_store

TRACKED_TEMPLATE = "mlflow-tracked"
TRACKED_POOL = "tracked"
# Why a submission may not name it (apps.nodes.closed: refused, and left off the form and pages).
TRACKED_POOL_REASON = f"pool {TRACKED_POOL} holds runs logged by MLflow clients; it runs nothing"
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
# runs/log-inputs: MLflow's limits (mlflow.utils.validation), and its column for source_type.
MAX_BATCH_DATASETS = 1000
MAX_INPUT_TAGS = 100  # Trainyard's bound on one input's tags (MLflow sets none; its request size does)
DATASET_LIMITS = {"name": 500, "digest": 36, "source_type": 36, "source": 65535, "schema": 1048575, "profile": 16777215}
MAX_INPUT_TAG_KEY = 255
MAX_INPUT_TAG_VALUE = 500
# MLflow RunStatus name -> Trainyard status, for runs/update.
END_STATUS = {"FINISHED": RunStatus.SUCCEEDED, "FAILED": RunStatus.FAILED, "KILLED": RunStatus.CANCELLED}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLAG_OF = {"NaN": 1, "Infinity": 2, "-Infinity": 3}


@dataclass(frozen=True)
class Batch:
    """What one log call carries, checked: metric rows, params and tags as strings."""

    metrics: Sequence[PointRow] = ()
    params: Sequence[tuple[str, str]] = ()
    tags: Sequence[tuple[str, str]] = ()


def experiment_create(*, user: AnyUser, name: Any) -> Project:
    """An experiment is a project. A team admin may create `team/project` in their team; anyone
    else gets PERMISSION_DENIED naming the rule (a project of another team reads as absent)."""
    text = str(name if name is not None else "").strip()
    team_slug, _, slug = text.partition("/")
    if not team_slug or not slug or "/" in slug:
        raise invalid("name", f"{text[:200]!r} is not team/project: an experiment is a Trainyard project, such as vision/digits")
    if project_list(user=user).filter(team__slug=team_slug, slug=slug).exists():
        raise MlflowError("RESOURCE_ALREADY_EXISTS", f"Experiment(name={text}) already exists.")
    team = Team.objects.filter(slug=team_slug).first()
    if team is None or not has_role(user=user, team_id=team.pk, at_least=Role.ADMIN):
        raise MlflowError("PERMISSION_DENIED", f"Cannot create experiment {text[:200]!r}: an experiment is a Trainyard project; "
                          "log to a project of your team, or ask a team admin to create it.")
    try:
        return project_create(team=team, slug=slug, name=slug)
    except ValidationError as exc:
        raise invalid("name", " ".join(exc.messages)) from None


def _tracked_template() -> JobTemplate:
    template, _ = JobTemplate.objects.get_or_create(slug=TRACKED_TEMPLATE, version=1, defaults={
        "title": "Tracked by MLflow", "kind": "custom", "entrypoint": "(logged by an MLflow client; not run by Trainyard)",
        "description": "Runs an MLflow client logged through /mlflow/: tracked only, never scheduled.", "published": False})
    return template


def _tracked_pool() -> NodePool:
    try:
        pool, _ = NodePool.objects.get_or_create(name=TRACKED_POOL, defaults={
            "description": "Runs logged by MLflow clients: no nodes, no price, never scheduled.",
            "price_per_device_hour": Decimal("0")})
    except IntegrityError:  # created by a concurrent first request
        pool = NodePool.objects.get(name=TRACKED_POOL)
    return pool


def _time(ms_value: Any, field: str) -> datetime | None:
    if ms_value in (None, "", 0, "0"):
        return None
    number = _int(ms_value, field)
    try:
        return datetime.fromtimestamp(number / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise invalid(field, f"{number} is not a time in milliseconds since 1970") from None


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise invalid(field, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise invalid(field, "must be an integer")


def require_writer(*, user: AnyUser, run: Run, active: bool = True) -> None:
    if not has_role(user=user, team_id=run.project.team_id, at_least=Role.ENGINEER):
        raise MlflowError("PERMISSION_DENIED", "Only engineers of the project's team may log to its runs.")
    if not run.tracked_only:
        raise MlflowError("INVALID_STATE", f"Run {run.pk} was submitted to Trainyard; only runs created through MLflow accept writes here.")
    if active and DeletedRun.objects.filter(run_id=run.pk).exists():
        # As MLflow: a deleted run takes no writes until it is restored.
        raise invalid("run_id", f"run {run.pk} is deleted (lifecycle_stage deleted); restore it (runs/restore) to write to it")


def tracked_run_delete(*, user: AnyUser, run: Run) -> Run:
    """MLflow's runs/delete: a soft delete (lifecycle_stage "deleted"); the run and all it logged
    stay. Deleting a deleted run changes nothing, as in MLflow."""
    require_writer(user=user, run=run, active=False)
    with transaction.atomic():
        _, created = DeletedRun.objects.get_or_create(run_id=run.pk, defaults={
            "deleted_at": timezone.now(), "deleted_by": user if user.is_authenticated else None})
        if created:
            audit_record(action="run.mlflow_deleted", target=run, team_id=run.project.team_id, actor=user,
                         before={"lifecycle_stage": "active"}, after={"lifecycle_stage": "deleted", "via": "mlflow"})
    return run


def tracked_run_restore(*, user: AnyUser, run: Run) -> Run:
    """MLflow's runs/restore: lifecycle_stage back to "active"; restoring an active run changes nothing."""
    require_writer(user=user, run=run, active=False)
    with transaction.atomic():
        removed, _ = DeletedRun.objects.filter(run_id=run.pk).delete()
        if removed:
            audit_record(action="run.mlflow_restored", target=run, team_id=run.project.team_id, actor=user,
                         before={"lifecycle_stage": "deleted"}, after={"lifecycle_stage": "active", "via": "mlflow"})
    return run


def tracked_run_create(*, user: AnyUser, project: Project, start_time: Any = None, run_name: Any = "",
                       tags: Sequence[tuple[str, str]] = ()) -> Run:
    if not has_role(user=user, team_id=project.team_id, at_least=Role.ENGINEER):
        raise MlflowError("PERMISSION_DENIED", "Only engineers of the project's team may create runs in it.")
    started = _time(start_time, "start_time") or timezone.now()
    tag_map = dict(tags)
    name = str(run_name or tag_map.get("mlflow.runName") or "")[:200]
    with transaction.atomic():
        run = run_new(status=RunStatus.RUNNING, project=project, template=_tracked_template(), pool=_tracked_pool(),
                      submitted_by=user if user.is_authenticated else None, name=name, tags=tag_map, tracked_only=True,
                      nodes=0, devices_per_node=0, max_restarts=0, preemptible=False, entrypoint="mlflow",
                      started_at=started)
        run.save()
        audit_record(action="run.tracked", target=run, team_id=project.team_id, actor=user,
                     after={"status": run.status, "name": name, "tracked_only": True, "via": "mlflow"})
    return run


def tracked_run_update(*, user: AnyUser, run: Run, status: Any = None, end_time: Any = None, run_name: Any = None) -> Run:
    """MLflow's runs/update: a new name, and/or an end (FINISHED, FAILED, KILLED) through the transition table."""
    require_writer(user=user, run=run)
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=run.pk)
        if run_name not in (None, "") and str(run_name) != run.name:
            run.name = str(run_name)[:200]
            run.save(update_fields=["name", "updated_at"])
        if status in (None, "", "RUNNING", "SCHEDULED"):
            return run
        to = END_STATUS.get(str(status))
        if to is None:
            raise invalid("status", f"{str(status)[:40]!r} is not one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED")
        if run.status == to:
            return run
        if run.is_finished:
            raise MlflowError("INVALID_STATE", f"Run {run.pk} already ended as {run.status}.")
        ended = _time(end_time, "end_time") or timezone.now()
        run_transition(run, to=to, action=f"run.{to}", reason="ended by its MLflow client", actor=user, finished_at=ended)
    return run


def batch_parse(*, metrics: Any = (), params: Any = (), tags: Any = ()) -> Batch:
    """Check a log call's metrics, params and tags (MLflow's JSON shapes) against MLflow's limits."""
    for field, items, limit in (("metrics", metrics, MAX_BATCH_METRICS), ("params", params, MAX_BATCH_PARAMS),
                                ("tags", tags, MAX_BATCH_TAGS)):
        if not isinstance(items, (list, tuple)):
            raise invalid(field, "must be a list")
        if len(items) > limit:
            raise invalid(field, f"{len(items)} given; the limit is {limit} per request")
    return Batch(metrics=[_metric_row(m, i) for i, m in enumerate(metrics)],
                 params=[_key_value(p, f"params[{i}]", MAX_PARAM_VALUE) for i, p in enumerate(params)],
                 tags=[_key_value(t, f"tags[{i}]", MAX_TAG_VALUE) for i, t in enumerate(tags)])


def _key(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(f"{where}.key", "must be a non-empty string")
    if len(value) > MAX_KEY_LENGTH:
        raise invalid(f"{where}.key", f"is {len(value)} characters; the limit is {MAX_KEY_LENGTH}")
    return value


def _key_value(item: Any, where: str, max_value: int) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise invalid(where, "must be an object with key and value")
    key = _key(item.get("key"), where)
    value = item.get("value", "")
    text = "" if value is None else value if isinstance(value, str) else str(value)
    if len(text) > max_value:
        raise invalid(f"{where}.value", f"is {len(text)} characters; the limit is {max_value}")
    return key, text


def _metric_row(item: Any, index: int) -> PointRow:
    where = f"metrics[{index}]"
    if not isinstance(item, dict):
        raise invalid(where, "must be an object with key, value, timestamp and step")
    key = _key(item.get("key"), where)
    if not KEY_PATTERN.match(key):
        raise invalid(f"{where}.key", f"{key[:60]!r}: metric names may contain only letters, digits and _ . - /")
    step = _int(item.get("step", 0) or 0, f"{where}.step")
    if step < 0 or step > MAX_STEP:
        raise invalid(f"{where}.step", "must be between 0 and 2**62")
    timestamp = _int(item.get("timestamp", 0) or 0, f"{where}.timestamp")
    raw = item.get("value")
    if isinstance(raw, str) and raw in _FLAG_OF:
        return key, step, None, _FLAG_OF[raw], timestamp / 1000
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise invalid(f"{where}.value", "must be a number (or \"NaN\", \"Infinity\", \"-Infinity\")")
    number = float(raw)
    if not math.isfinite(number):
        return key, step, None, _FLAG_OF["NaN" if math.isnan(number) else "Infinity" if number > 0 else "-Infinity"], timestamp / 1000
    return key, step, number, 0, timestamp / 1000


def run_log(*, user: AnyUser, run: Run, batch: Batch) -> None:
    """Store a checked batch in one transaction: params (immutable once set, as in MLflow), tags, metric points."""
    require_writer(user=user, run=run)
    with transaction.atomic():
        # The run's row lock also orders concurrent metric calls: each reads its steps' points first.
        locked = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
        if batch.params or batch.tags:
            params, tags = dict(locked.params), dict(locked.tags)
            for key, value in batch.params:
                if key in params and str(params[key]) != value:
                    raise invalid("params", f"param {key!r} was already logged as {str(params[key])[:100]!r}; "
                                  f"params cannot change (tried {value[:100]!r})")
                params[key] = value
            tags.update(batch.tags)
            fields = ["updated_at"]
            if params != locked.params:
                locked.params, fields = params, [*fields, "params"]
            if tags != locked.tags:
                locked.tags, fields = tags, [*fields, "tags"]
            if "mlflow.runName" in dict(batch.tags) and not locked.name:
                locked.name, fields = dict(batch.tags)["mlflow.runName"][:200], [*fields, "name"]
            locked.save(update_fields=fields)
            run.params, run.tags, run.name = locked.params, locked.tags, locked.name
        if batch.metrics:
            keep, superseded = _metric_split(run_id=run.pk, rows=batch.metrics)
            metric_points_store(run_id=run.pk, attempt=0, rows=keep)
            SupersededPoint.objects.bulk_create(SupersededPoint(run_id=run.pk, key=k, step=s, value=v, flag=f, wall_time=w)
                                                for k, s, v, f, w in superseded)


def _metric_split(*, run_id: int, rows: Sequence[PointRow]) -> tuple[list[PointRow], list[PointRow]]:
    """Split a batch into the points that become their step's value (the latest timestamp; on a
    tie, the last logged) and the values that step keeps besides (a stored point displaced by the
    batch included). A value already stored, exactly, is a repeat (a client's retry) and is skipped."""
    keys, steps = {r[0] for r in rows}, {r[1] for r in rows}
    current: dict[tuple[str, int], PointRow] = {
        (k, s): (k, s, v, f, w) for k, s, v, f, w in MetricPoint.objects.filter(run_id=run_id, key__in=keys, step__in=steps)
        .values_list("key", "step", "value", "flag", "wall_time")}
    stored = set(current.values()) | set(SupersededPoint.objects.filter(run_id=run_id, key__in=keys, step__in=steps)
                                         .values_list("key", "step", "value", "flag", "wall_time"))
    winner = dict(current)
    superseded: list[PointRow] = []
    for row in rows:
        if row in stored:
            continue
        stored.add(row)
        held = winner.get((row[0], row[1]))
        if held is not None and held[4] > row[4]:
            superseded.append(row)
            continue
        if held is not None:
            superseded.append(held)
        winner[(row[0], row[1])] = row
    keep = [row for pair, row in winner.items() if current.get(pair) != row]
    return keep, superseded


@dataclass(frozen=True)
class Dataset:
    """One checked entry of runs/log-inputs' ``datasets``: MLflow's Dataset fields and the input's tags."""

    name: str
    digest: str
    source_type: str
    source: str
    schema: str | None
    profile: str | None
    tags: Sequence[tuple[str, str]]


def inputs_parse(*, datasets: Any) -> list[Dataset]:
    """Check runs/log-inputs' ``datasets`` (MLflow's DatasetInput JSON) against MLflow's limits."""
    if datasets is None:
        return []
    if not isinstance(datasets, (list, tuple)):
        raise invalid("datasets", "must be a list")
    if len(datasets) > MAX_BATCH_DATASETS:
        raise invalid("datasets", f"{len(datasets)} given; the limit is {MAX_BATCH_DATASETS} per request")
    return [_dataset(item, f"datasets[{i}]") for i, item in enumerate(datasets)]


def _dataset(item: Any, where: str) -> Dataset:
    if not isinstance(item, dict) or not isinstance(item.get("dataset"), dict):
        raise invalid(where, "must be an object with dataset (name, digest, source_type, source) and tags")
    raw = item["dataset"]
    fields: dict[str, str | None] = {}
    for field, limit in DATASET_LIMITS.items():
        value = raw.get(field)
        if value is None or (value == "" and field in ("schema", "profile")):
            if field not in ("schema", "profile"):
                raise invalid(f"{where}.dataset.{field}", "required")
            fields[field] = None
            continue
        if not isinstance(value, str):
            raise invalid(f"{where}.dataset.{field}", "must be a string")
        if len(value) > limit:
            raise invalid(f"{where}.dataset.{field}", f"is {len(value)} characters; the limit is {limit}")
        fields[field] = value
    tags = item.get("tags") or []
    if not isinstance(tags, (list, tuple)):
        raise invalid(f"{where}.tags", "must be a list")
    if len(tags) > MAX_INPUT_TAGS:
        raise invalid(f"{where}.tags", f"{len(tags)} given; the limit is {MAX_INPUT_TAGS} per input")
    pairs: list[tuple[str, str]] = []
    for j, tag in enumerate(tags):
        at = f"{where}.tags[{j}]"
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str) or not tag["key"]:
            raise invalid(f"{at}.key", "must be a non-empty string")
        value = tag.get("value")
        if not isinstance(value, str):
            raise invalid(f"{at}.value", "must be a string")
        if len(tag["key"]) > MAX_INPUT_TAG_KEY:
            raise invalid(f"{at}.key", f"is {len(tag['key'])} characters; the limit is {MAX_INPUT_TAG_KEY}")
        if len(value) > MAX_INPUT_TAG_VALUE:
            raise invalid(f"{at}.value", f"is {len(value)} characters; the limit is {MAX_INPUT_TAG_VALUE}")
        pairs.append((tag["key"], value))
    return Dataset(name=str(fields["name"]), digest=str(fields["digest"]), source_type=str(fields["source_type"]),
                   source=str(fields["source"]), schema=fields["schema"], profile=fields["profile"], tags=pairs)


def run_log_inputs(*, user: AnyUser, run: Run, datasets: Sequence[Dataset]) -> int:
    """Store a run's dataset inputs; one per (run, name, digest), as MLflow: a dataset the run
    already has is skipped, its first tags kept. Returns how many were new. Not audited, like
    params, tags and metrics (only the run's lifecycle is)."""
    require_writer(user=user, run=run)
    if not datasets:
        return 0
    with transaction.atomic():
        held = set(DatasetInput.objects.filter(run_id=run.pk, name__in={d.name for d in datasets})
                   .values_list("name", "digest"))
        new: list[DatasetInput] = []
        for d in datasets:
            if (d.name, d.digest) in held:
                continue
            held.add((d.name, d.digest))
            new.append(DatasetInput(run_id=run.pk, name=d.name, digest=d.digest, source_type=d.source_type, source=d.source,
                                    schema=d.schema, profile=d.profile, tags=[list(t) for t in d.tags]))
        # ignore_conflicts: a concurrent call logging the same dataset wins; nothing is duplicated.
        DatasetInput.objects.bulk_create(new, ignore_conflicts=True)
    return len(new)
