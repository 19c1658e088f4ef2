"""Acceptance 1: ingestion is idempotent, replaces on resume, keeps non-finite values, and
rejects every bad batch whole with a 4xx that names the problem. Runs on SQLite and, with
DATABASE_URL, on PostgreSQL (same tests)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.runs.models import RunStatus
from apps.tracking.models import MetricPoint, MetricSummary
from tests.tracking.conftest import Reporting, make_attempt, make_node, make_reporting

T = 1_700_000_000.0


def values(run_id: int, key: str) -> dict[int, tuple[float | None, int, int]]:
    return {s: (v, f, a) for s, v, f, a in
            MetricPoint.objects.filter(run_id=run_id, key=key).values_list("step", "value", "flag", "attempt")}


def test_retried_batch_keeps_one_value_per_step(reporting: Reporting) -> None:
    points = [["loss", s, 1.0 / (s + 1), T + s] for s in range(100)] + [["acc", s, s / 100, T + s] for s in range(100)]
    for _ in range(3):
        resp = reporting.post(reporting.batch(points))
        assert resp.status_code == 200, resp.content
        assert resp.json() == {"accepted": 200}
    assert MetricPoint.objects.filter(run=reporting.run).count() == 200
    summary = MetricSummary.objects.get(run=reporting.run, key="loss")
    assert (summary.count, summary.first_step, summary.last_step, summary.max, summary.min) == (100, 0, 99, 1.0, 0.01)


def test_duplicate_steps_inside_one_batch_last_wins(reporting: Reporting) -> None:
    resp = reporting.post(reporting.batch([["loss", 5, 1.0, T], ["loss", 5, 2.0, T + 1]]))
    assert resp.status_code == 200
    assert values(reporting.run.pk, "loss") == {5: (2.0, 0, 1)}


def test_later_attempt_replaces_step(cast: Any, reporting: Reporting) -> None:
    reporting.post(reporting.batch([["loss", s, 10.0, T + s] for s in range(10)]))
    second = make_attempt(reporting.run, reporting.node, number=2)
    resp = reporting.post(reporting.batch([["loss", s, 1.0, T + 100 + s] for s in range(5, 12)], attempt=second))
    assert resp.status_code == 200, resp.content
    got = values(reporting.run.pk, "loss")
    assert len(got) == 12
    assert got[4] == (10.0, 0, 1) and got[5] == (1.0, 0, 2) and got[11] == (1.0, 0, 2)
    summary = MetricSummary.objects.get(run=reporting.run, key="loss")
    assert (summary.count, summary.last_value, summary.max, summary.min) == (12, 1.0, 10.0, 1.0)
    # The first attempt is now stale: the fence answers 409 and stores nothing.
    resp = reporting.post(reporting.batch([["loss", 3, 99.0, T]]))
    assert resp.status_code == 409
    assert values(reporting.run.pk, "loss")[3] == (10.0, 0, 1)


def test_non_finite_values_are_kept_and_read_back_as_strings(cast: Any, reporting: Reporting) -> None:
    batch = [["loss", 0, 1.5, T], ["loss", 1, "NaN", T + 1], ["loss", 2, "Infinity", T + 2], ["loss", 3, "-Infinity", T + 3]]
    assert reporting.post(reporting.batch(batch)).status_code == 200
    assert values(reporting.run.pk, "loss") == {0: (1.5, 0, 1), 1: (None, 1, 1), 2: (None, 2, 1), 3: (None, 3, 1)}
    api = cast.client(cast.alice)
    series = api.get(f"/api/v1/runs/{reporting.run.pk}/metrics/?key=loss").json()["series"][0]
    assert series["mean"] == [1.5, "NaN", "Infinity", "-Infinity"]
    assert (series["true_min"], series["true_max"]) == ("-Infinity", "Infinity")
    keys = api.get(f"/api/v1/runs/{reporting.run.pk}/metrics/keys/").json()["keys"]
    assert keys[0]["last"] == "-Infinity" and keys[0]["first"] == 1.5 and keys[0]["nonfinite"] == 3


def _bad_batches(rep: Reporting) -> list[tuple[str, Any, int, str]]:
    ok = ["loss", 1, 0.5, T]
    return [
        ("long key", rep.batch([ok, ["k" * 251, 1, 0.5, T]]), 400, "points[1]: key is 251 characters; the limit is 250"),
        ("bad pattern", rep.batch([["loss rate!", 1, 0.5, T]]), 400, "points[0]: key 'loss rate!'"),
        ("non-numeric value", rep.batch([ok, ok, ["loss", 2, "abc", T]]), 400, "points[2]: value must be a number"),
        ("bool value", rep.batch([["loss", 2, True, T]]), 400, "points[0]: value must be a number"),
        ("bool step", rep.batch([["loss", True, 1.0, T]]), 400, "points[0]: step must be an integer"),
        ("negative step", rep.batch([["loss", -1, 1.0, T]]), 400, "points[0]: step must be an integer"),
        ("float step", rep.batch([["loss", 1.5, 1.0, T]]), 400, "points[0]: step must be an integer"),
        ("wall time", rep.batch([["loss", 1, 1.0, "Infinity"]]), 400, "points[0]: wall_time must be a finite number"),
        ("short point", rep.batch([["loss", 1, 1.0]]), 400, "points[0]: must be [key, step, value, wall_time]"),
        ("huge int value", rep.batch([["loss", 1, 10**400, T]]), 400, "points[0]: value is out of the float range"),
        ("10,001 points", rep.batch([["loss", s, 1.0, T] for s in range(10_001)]), 400, "10001 points; the limit is 10000"),
        ("no points", {"attempt_id": rep.attempt.pk, "attempt": 1}, 400, "points: required"),
        ("no attempt", {"points": [ok]}, 400, "attempt_id: required"),
        ("not json", b"{nope", 400, "not valid JSON"),
        ("bare NaN", b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 1, NaN, 1]]}', 400, "not valid JSON"),
        ("5 MB body", b"[" + b" " * (5 * 1024 * 1024) + b"]", 413, "larger than the limit of 4194304 bytes"),
        ("unknown attempt", {"attempt_id": 987654, "attempt": 1, "points": [ok]}, 404, "attempt 987654 is not assigned"),
        ("wrong number", {"attempt_id": rep.attempt.pk, "attempt": 7, "points": [ok]}, 409, "not 7"),
    ]


@pytest.mark.parametrize("case", range(18))
def test_invalid_batches_are_rejected_whole(reporting: Reporting, case: int) -> None:
    name, body, status, needle = _bad_batches(reporting)[case]
    raw = body if isinstance(body, bytes) else None
    resp = reporting.post(body, raw=raw)
    assert resp.status_code == status, (name, resp.content[:300])
    error = resp.json()["error"]
    assert error["status"] == status and needle in error["message"], (name, error)
    assert not MetricPoint.objects.filter(run=reporting.run).exists(), name
    assert not MetricSummary.objects.filter(run=reporting.run).exists(), name


def test_declared_content_length_over_limit_is_413_before_reading(reporting: Reporting) -> None:
    from django.test import Client

    resp = Client().generic("POST", "/api/v1/agent/metrics/", data=b"{}", content_type="application/json",
                            HTTP_AUTHORIZATION=f"Node {reporting.secret}", CONTENT_LENGTH=str(5 * 1024 * 1024))
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "payload_too_large"


def test_other_nodes_run_is_404(cast: Any, reporting: Reporting) -> None:
    _, other_secret = make_node()
    resp = reporting.post(reporting.batch([["loss", 1, 1.0, T]]), secret=other_secret)
    assert resp.status_code == 404
    assert not MetricPoint.objects.exists()


def test_finished_run_is_409(cast: Any) -> None:
    rep = make_reporting(cast.digits, status=RunStatus.SUCCEEDED)
    resp = rep.post(rep.batch([["loss", 1, 1.0, T]]))
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "run_finished"
    assert not MetricPoint.objects.exists()


def test_user_credentials_cannot_post_metrics(cast: Any, reporting: Reporting) -> None:
    resp = cast.client(cast.alice).post("/api/v1/agent/metrics/", reporting.batch([["loss", 1, 1.0, T]]), format="json")
    assert resp.status_code in (401, 403)
    assert not MetricPoint.objects.exists()


def test_full_batch_of_ten_thousand_points(reporting: Reporting) -> None:
    points = [[k, s, float(s % 97), T + s] for k in ("loss", "acc") for s in range(5000)]
    resp = reporting.post(reporting.batch(points))
    assert resp.status_code == 200 and resp.json() == {"accepted": 10_000}
    assert json.loads(resp.content)["accepted"] == MetricPoint.objects.filter(run=reporting.run).count()
