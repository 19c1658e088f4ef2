"""Saving and deleting named comparisons (apps.tracking.models.SavedComparison)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from apps.audit.services import audit_record
from apps.core.errors import FieldError, Forbidden
from apps.runs.selectors import run_list
from apps.tenants.models import Project, Role
from apps.tenants.selectors import AnyUser, has_role, project_list
from apps.tracking.models import SavedComparison
from apps.tracking.selectors import COMPARE_MAX_KEYS, COMPARE_MAX_RUNS, COMPARE_MIN_RUNS

NAME_MAX = 100
KEY_MAX = 250
X_AXES = ("step", "time")


@dataclass(frozen=True)
class ComparisonSettings:
    """What a saved comparison holds besides its name: the page's state when it was saved."""

    run_ids: tuple[int, ...]
    keys: tuple[str, ...] = ()
    metric: str = ""
    only_differences: bool | None = None
    x_axis: str = "step"


def _clean_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise FieldError("name", "give the comparison a name (1 to 100 characters)")
    name = " ".join(name.split())
    if len(name) > NAME_MAX:
        raise FieldError("name", f"{len(name)} characters; a name has at most {NAME_MAX}")
    return name


def _check_settings(settings: ComparisonSettings) -> None:
    if not COMPARE_MIN_RUNS <= len(settings.run_ids) <= COMPARE_MAX_RUNS:
        raise FieldError("runs", f"{len(settings.run_ids)} runs; a comparison takes {COMPARE_MIN_RUNS} to {COMPARE_MAX_RUNS}")
    if len(set(settings.run_ids)) != len(settings.run_ids):
        raise FieldError("runs", "a run is listed twice")
    if len(settings.keys) > COMPARE_MAX_KEYS:
        raise FieldError("keys", f"{len(settings.keys)} keys; a comparison shows at most {COMPARE_MAX_KEYS}")
    for value, field in [*((k, "keys") for k in settings.keys), (settings.metric, "metric")]:
        if len(value) > KEY_MAX:
            raise FieldError(field, f"a metric key has at most {KEY_MAX} characters")
    if settings.x_axis not in X_AXES:
        raise FieldError("x", f"must be one of {', '.join(X_AXES)}")


def saved_comparison_create(*, user: AnyUser, name: Any, settings: ComparisonSettings,
                            project: Project | None = None) -> SavedComparison:
    """Saves the comparison under `name` in `project` (default: the first run's). Every run must
    be one the user can see, and a member of the project's team saves it (viewers included: a
    saved comparison changes no run)."""
    name = _clean_name(name)
    _check_settings(settings)
    visible = dict(run_list(user=user).filter(pk__in=settings.run_ids).values_list("pk", "project_id"))
    missing = [i for i in settings.run_ids if i not in visible]
    if missing:
        raise FieldError("runs", f"no run {', '.join(map(str, missing))} that you can see")
    if project is None:
        project = project_list(user=user).get(pk=visible[settings.run_ids[0]])
    if not has_role(user=user, team_id=project.team_id, at_least=Role.VIEWER):
        raise Forbidden("only a member of the project's team may save a comparison in it")
    teams = dict(Project.objects.filter(pk__in=set(visible.values())).values_list("pk", "team_id"))
    outside = [i for i in settings.run_ids if teams[visible[i]] != project.team_id]
    if outside:
        # Its team could not open it: the other team's runs are not theirs to see.
        raise FieldError("runs", f"run {', '.join(map(str, outside))} is not in the team of project {project.full_slug}")
    try:
        with transaction.atomic():
            saved = SavedComparison.objects.create(
                project=project, name=name, run_ids=list(settings.run_ids), keys=list(settings.keys), metric=settings.metric,
                only_differences=settings.only_differences, x_axis=settings.x_axis,
                created_by=user if user.is_authenticated else None)
    except IntegrityError:
        raise FieldError("name", f"this project already has a comparison named {name!r}") from None
    audit_record(action="comparison.saved", target=saved, team_id=project.team_id,
                 after={"name": name, "runs": list(settings.run_ids)}, actor=user if user.is_authenticated else None)
    return saved


def saved_comparison_delete(*, user: AnyUser, saved: SavedComparison) -> None:
    """Who saved it or an admin of its team deletes it."""
    team_id = saved.project.team_id
    if saved.created_by_id != user.pk and not has_role(user=user, team_id=team_id, at_least=Role.ADMIN):
        raise Forbidden("only who saved this comparison or an admin of its team may delete it")
    audit_record(action="comparison.deleted", target=saved, team_id=team_id, before={"name": saved.name},
                 actor=user if user.is_authenticated else None)
    saved.delete()
