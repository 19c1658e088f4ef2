"""Fixtures shared by the billing tests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.billing.services import accrual_run, budget_create, quota_set
from apps.runs.models import AttemptStatus, RunStatus
from apps.tracking.models import MetricSummary
from tests.billing.helpers import make_attempt, make_pool, make_run


@pytest.fixture
def spend(cast: Any) -> Any:
    """Vision spent $3.00 this month (one succeeded run, one failed); nlp $1.00."""
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=5))
    pool = make_pool("local", prices=[(start - timedelta(days=400), "1.00")])
    ok = make_run(cast.digits, pool, status=RunStatus.SUCCEEDED, family="fam-a", steps_done=100)
    make_attempt(ok, started_at=start, ended_at=start + timedelta(hours=1), devices=[0, 1], energy_j=3_600_000)
    bad = make_run(cast.digits, pool, status=RunStatus.FAILED, family="fam-a")
    make_attempt(bad, started_at=start, ended_at=start + timedelta(hours=1), status=AttemptStatus.FAILED)
    nlp = make_run(cast.tinylm, pool, status=RunStatus.SUCCEEDED)
    make_attempt(nlp, started_at=start, ended_at=start + timedelta(hours=1))
    accrual_run(now=start + timedelta(hours=2))
    MetricSummary.objects.create(run=ok, key="accuracy", last_value=0.9731, count=1, finite_count=1)
    budget_create(team=cast.vision, project=cast.digits, amount="100.00")
    quota_set(team=cast.vision, pool=pool, guaranteed_devices=2, borrow_limit=1)
    return pool
