"""Issue 29: `GET /api/v1/runs/?metrics=loss,val_accuracy` gives each row the last (and its
step), min and max of those keys, for scripts that rank runs; bad input is a 400 naming `metrics`."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.db import transaction

from apps.runs.models import RunStatus
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run


def _store(run_id: int, key: str, values: list[float]) -> None:
    with transaction.atomic():
        metric_points_store(run_id=run_id, attempt=1,
                            rows=[(key, step, v, 0, 1_700_000_000.0 + step) for step, v in enumerate(values)])


def test_each_row_gets_last_min_and_max_of_the_keys_asked(cast: Any) -> None:
    a = make_run(cast.digits, name="a", status=RunStatus.SUCCEEDED)
    b = make_run(cast.digits, name="b", status=RunStatus.RUNNING)
    _store(a.pk, "loss", [2.0, 0.5, 0.7])
    _store(a.pk, "val_accuracy", [0.5, 0.9])
    _store(b.pk, "loss", [3.0, 1.0])
    other = make_run(cast.other_project, name="theirs") if hasattr(cast, "other_project") else None
    data = cast.client(cast.alice).get("/api/v1/runs/?metrics=loss,val_accuracy").json()
    rows = {r["id"]: r["metrics_summary"] for r in data["results"]}
    assert rows[a.pk] == {"loss": {"last": 0.7, "last_step": 2, "min": 0.5, "max": 2.0},
                          "val_accuracy": {"last": 0.9, "last_step": 1, "min": 0.5, "max": 0.9}}
    assert rows[b.pk] == {"loss": {"last": 1.0, "last_step": 1, "min": 1.0, "max": 3.0}, "val_accuracy": None}
    if other is not None:
        assert other.pk not in rows
    # Without the parameter the rows are as before.
    plain = cast.client(cast.alice).get("/api/v1/runs/").json()["results"]
    assert plain and all("metrics_summary" not in r for r in plain)


def test_non_finite_values_keep_the_api_encoding(cast: Any) -> None:
    run = make_run(cast.digits, name="nan")
    _store(run.pk, "loss", [1.0, math.nan])
    row = cast.client(cast.alice).get("/api/v1/runs/?metrics=loss").json()["results"][0]
    assert row["metrics_summary"]["loss"]["min"] == 1.0 and row["metrics_summary"]["loss"]["last"] in ("NaN", "nan", None)


@pytest.mark.parametrize(("value", "message"), [
    ("", "name at least one metric key"),
    (",".join(f"k{i}" for i in range(11)), "at most 10 keys, got 11"),
    ("x" * 251, "a key is at most 250 characters, got 251"),
])
def test_bad_metrics_parameter_is_a_400_naming_it(cast: Any, value: str, message: str) -> None:
    make_run(cast.digits)
    response = cast.client(cast.alice).get("/api/v1/runs/", {"metrics": value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["fields"]["metrics"][0]
