"""The finance top-runs table's "Wh / step": the run's whole energy over its steps done, to three
significant figures, and a dash where no energy was measured. It used to read 0.0 or 0.0001
for every CPU run: the ledger keeps energy to the milliwatt-hour and the figure was rounded to
four decimal places."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from apps.billing.services import accrual_run
from apps.runs.models import RunStatus
from tests.billing.helpers import make_attempt, make_pool, make_run


def _wh_per_step(html: str, run_id: int) -> str:
    table = html[html.index('id="top-runs"'):]
    row = re.search(rf'<tr><td><a href="/runs/{run_id}/">.*?</tr>', table, re.S)
    assert row, f"run {run_id} is not in the top runs"
    cell = re.search(r'<td class="num wh-per-step"[^>]*>(.*?)</td>', row.group(0), re.S)
    assert cell, row.group(0)
    return cell.group(1).strip()


def test_wh_per_step_has_a_figure_for_a_short_cpu_run_and_a_dash_without_energy(cast: Any) -> None:
    start = timezone.now() - timedelta(minutes=30)
    pool = make_pool("local", prices=[(start - timedelta(days=1), "1.00")])
    # As measured on a live stack: a CPU run of 19 steps used 6.092 J (estimated).
    cpu = make_run(cast.digits, pool, status=RunStatus.SUCCEEDED, steps_done=19, energy_j=6.092, energy_estimated=True)
    make_attempt(cpu, started_at=start, ended_at=start + timedelta(seconds=5), energy_j=6.092)
    # A gang of 4 devices that used 1 kWh over 100 steps.
    gang = make_run(cast.digits, pool, status=RunStatus.SUCCEEDED, steps_done=100, nodes=2, devices_per_node=2, energy_j=3_600_000)
    make_attempt(gang, started_at=start, ended_at=start + timedelta(minutes=10), devices=[0, 1], energy_j=3_600_000)
    unmeasured = make_run(cast.digits, pool, status=RunStatus.SUCCEEDED, steps_done=50)
    make_attempt(unmeasured, started_at=start, ended_at=start + timedelta(minutes=1))
    accrual_run(now=start + timedelta(minutes=20))

    client = Client()
    client.force_login(cast.admin)
    page = client.get("/finance/").content.decode()
    assert _wh_per_step(page, cpu.pk) == "≈ 0.0000891"  # 6.092 J / 3600 / 19; estimated energy
    assert _wh_per_step(page, gang.pk) == "10.0"
    assert _wh_per_step(page, unmeasured.pk) == "–"  # not "0.0": nothing was measured
