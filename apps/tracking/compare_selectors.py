"""Reads for the comparison page: which metric and settings it opens on, each run's cost, and the
saved comparisons a user may open."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from apps.runs.detail_selectors import run_cost
from apps.runs.models import Run
from apps.tenants.selectors import AnyUser, team_ids_for_user
from apps.tracking.models import MetricSummary, SavedComparison
from apps.tracking.selectors import _by_coverage, _value

# "Only differences" starts on above this many runs: with two, every row is worth reading.
ONLY_DIFFERENCES_FROM = 3


def compare_metric_choices(*, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The metrics these runs logged, those logged by the most runs first (ties by name), each
    with the runs that logged it and whether their last values differ."""
    runs_of: dict[str, set[int]] = {}
    lasts: dict[str, set[float | str]] = {}
    rows = MetricSummary.objects.filter(run_id__in=run_ids).values_list("run_id", "key", "last_value", "last_flag")
    for run_id, key, value, flag in rows:
        runs_of.setdefault(key, set()).add(run_id)
        last = _value(value, flag)
        lasts.setdefault(key, set()).add("nan" if math.isnan(last) else last)
    choices = _by_coverage(runs_of, run_ids)
    for choice in choices:
        choice["differs"] = len(lasts[choice["key"]]) > 1
    return choices


def compare_default_metric(*, choices: Sequence[dict[str, Any]]) -> str:
    """The parallel coordinates' first metric: the widest-logged one whose last values differ
    between the runs (a flat line says nothing), else the widest-logged one."""
    differing = [c for c in choices if c["differs"]]
    pick = differing[0] if differing else (choices[0] if choices else None)
    return pick["key"] if pick else ""


def compare_only_differences_default(*, count: int) -> bool:
    return count >= ONLY_DIFFERENCES_FROM


def compare_costs(*, runs: Sequence[Run]) -> dict[int, Decimal]:
    """Each run's cost as its own page gives it (device time at the pool's price)."""
    return {r.pk: run_cost(run=r) for r in runs}


def saved_comparison_list(*, user: AnyUser) -> QuerySet[SavedComparison]:
    """The saved comparisons of the user's teams' projects; another team's are simply absent."""
    return SavedComparison.objects.filter(project__team_id__in=team_ids_for_user(user=user)).select_related(
        "project__team", "created_by")
