"""`GET /api/v1/runs/?metrics=loss,val_accuracy`: each row of the runs list gets
`metrics_summary`, the last (with its step), min and max of those keys, so a script can rank runs
without one request per run. Registered in runs' RUN_LIST_EXTRAS by TrackingConfig.ready."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

from apps.core.errors import FieldError
from apps.tracking.selectors import metrics_summary

MAX_KEYS = 10
MAX_KEY_LENGTH = 250  # MetricSummary.key's length


def metric_keys(raw: str) -> list[str]:
    """The keys asked for, in order, each once; a 400 naming `metrics` and the limit otherwise."""
    keys = list(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    if not keys:
        raise FieldError("metrics", "name at least one metric key, e.g. metrics=loss,val_accuracy")
    if len(keys) > MAX_KEYS:
        raise FieldError("metrics", f"at most {MAX_KEYS} keys, got {len(keys)}")
    long = next((k for k in keys if len(k) > MAX_KEY_LENGTH), None)
    if long is not None:
        raise FieldError("metrics", f"a key is at most {MAX_KEY_LENGTH} characters, got {len(long)}")
    return keys


def add_metrics_summary(params: QueryDict, rows: list[dict[str, Any]]) -> None:
    if "metrics" not in params:
        return
    keys = metric_keys(str(params.get("metrics", "")))
    summaries = metrics_summary(run_ids=[row["id"] for row in rows], keys=keys)
    for row in rows:
        row["metrics_summary"] = summaries[row["id"]]
