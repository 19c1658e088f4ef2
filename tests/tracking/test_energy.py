"""Energy per device of a gang, and per step and per 1k samples: the selector over EnergySample
readings, the run page's Energy panel, and the comparison (page, API and CSV)."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from apps.nodes.models import Node
from apps.runs.models import Assignment, Attempt, EnergySample, Run, RunStatus
from apps.tracking.energy_selectors import run_energy_figures
from apps.tracking.services import metric_points_store
from tests.pages import page_html
from tests.tracking.conftest import make_pool, make_run

T = 1_700_000_000.0
# Per attempt and device: two cumulative readings (seconds after T, joules, utilization %, watts).
FIRST = [(0, 100.0, 50.0, 30.0), (10, 400.0, 70.0, 30.0)]
SECOND = [(100, 200.0, 90.0, 80.0), (110, 1000.0, 100.0, 80.0)]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T + seconds, tz=UTC)


def make_gang(project: Any, *, name: str = "gang", steps_done: int = 100, params: dict[str, Any] | None = None) -> Run:
    """2 nodes x 2 devices, two attempts (the second resumed); device k of the 4 used k x 1400 J."""
    run = make_run(project, name=name, status=RunStatus.SUCCEEDED, nodes=2, devices_per_node=2, steps_done=steps_done,
                   total_steps=steps_done, params=params if params is not None else {"batch_size": 64})
    nodes = [Node.objects.create(pool=make_pool(), hostname=f"{name}-{n}", agent_uid=f"{name}-{n}") for n in "ab"]
    total = 0.0
    for number, readings in ((1, FIRST), (2, SECOND)):
        attempt = Attempt.objects.create(run=run, number=number, status="succeeded" if number == 2 else "failed")
        joules = 0.0
        for rank, node in enumerate(nodes):
            Assignment.objects.create(attempt=attempt, node=node, node_rank=rank, devices=[0, 1])
            for device in (0, 1):
                scale = 1 + device + 2 * rank
                EnergySample.objects.bulk_create([
                    EnergySample(attempt=attempt, node=node, device_index=device, at=_at(t), energy_j=j * scale, utilization=u,
                                 power_w=w) for t, j, u, w in readings])
                joules += readings[-1][1] * scale
        Attempt.objects.filter(pk=attempt.pk).update(energy_j=joules)
        total += joules
    Run.objects.filter(pk=run.pk).update(energy_j=total)
    run.refresh_from_db()
    return run


def _log(run: Run, key: str, values: list[float]) -> None:
    metric_points_store(run_id=run.pk, attempt=1, rows=[(key, step, v, 0, T + step) for step, v in enumerate(values, 1)])


def test_gang_energy_is_the_sum_over_its_four_devices_with_a_row_each(cast: Any) -> None:
    run = make_gang(cast.digits)
    _log(run, "throughput", [640.0, 650.0])  # samples/s: the job counts samples, batch_size 64 a step
    figures = run_energy_figures(run=run)

    assert [(d.node, d.device_index) for d in figures.devices] == [("gang-a", 0), ("gang-a", 1), ("gang-b", 0), ("gang-b", 1)]
    # Each device: the last cumulative reading of each attempt, summed over the attempts.
    assert [d.energy_j for d in figures.devices] == [1400.0, 2800.0, 4200.0, 5600.0]
    assert figures.energy_j == 14_000.0 == run.energy_j and not figures.estimated
    first = figures.devices[0]
    assert (first.mean_utilization, first.last_utilization, first.mean_power_w, first.last_power_w) == (77.5, 100.0, 55.0, 80.0)
    # All attempts' energy over the steps done (the second attempt repeated steps: per useful step).
    assert figures.wh_per_step == pytest.approx(14_000 / 3600 / 100)
    assert figures.samples == 6400 and figures.samples_source == "batch_size 64 × 100 steps"
    assert figures.wh_per_1k_samples == pytest.approx(14_000 / 3600 / 6.4)
    assert figures.as_dict()["wh_per_step_text"] == "0.0389"


def test_samples_come_from_a_samples_metric_first_and_only_where_the_job_reports_them(cast: Any) -> None:
    counted = make_gang(cast.digits, name="counted")
    _log(counted, "samples", [5000.0, 7000.0])
    assert run_energy_figures(run=counted).samples == 7000.0
    silent = make_gang(cast.digits, name="silent")  # batch_size, but no samples or throughput metric
    figures = run_energy_figures(run=silent)
    assert figures.samples is None and figures.wh_per_1k_samples is None
    assert figures.as_dict()["wh_per_1k_samples_text"] == "–"


def test_no_energy_is_no_figure_and_a_cpu_estimate_is_marked(cast: Any) -> None:
    run = make_run(cast.digits, status=RunStatus.SUCCEEDED, steps_done=20)
    figures = run_energy_figures(run=run)
    assert not figures.measured and figures.wh_per_step is None and figures.devices == ()

    cpu = make_run(cast.digits, name="cpu", status=RunStatus.SUCCEEDED, steps_done=19, energy_j=6.092, energy_estimated=True)
    node = Node.objects.create(pool=make_pool(), hostname="cpu-node", agent_uid="cpu-node")
    attempt = Attempt.objects.create(run=cpu, number=1, status="succeeded", energy_j=6.092)
    EnergySample.objects.create(attempt=attempt, node=node, device_index=-1, at=_at(5), energy_j=6.092, estimated=True)
    figures = run_energy_figures(run=cpu)
    assert figures.estimated and [d.device for d in figures.devices] == ["whole node"]
    assert figures.as_dict()["wh_per_step_text"] == "0.0000891"

    html = page_html(cast.alice, f"/runs/{cpu.pk}/")
    panel = html[html.index('id="energy-panel"'):html.index("</table>", html.index('id="energy-panel"'))]
    assert "energy-estimated" in panel and "estimated" in re.sub(r"<[^>]+>", " ", panel)


def test_run_page_energy_panel_shows_totals_per_step_and_each_device(cast: Any) -> None:
    run = make_gang(cast.digits)
    _log(run, "throughput", [640.0])
    html = page_html(cast.alice, f"/runs/{run.pk}/")
    start = html.index('id="energy-panel"')
    panel = html[start:html.index("</table>", start)]
    text = " ".join(re.sub(r"<[^>]+>", " ", panel).split())
    assert "3.89 Wh measured" in text
    assert "0.0389 Wh all attempts over 100 steps done" in text
    assert "0.608 Wh samples: batch_size 64 × 100 steps" in text
    rows = re.findall(r"<tr><td>(gang-[ab])</td><td>(\d)</td><td class=\"num\">([\d.,]+)", panel)
    assert rows == [("gang-a", "0", "0.389"), ("gang-a", "1", "0.778"), ("gang-b", "0", "1.17"), ("gang-b", "1", "1.56")]
    assert "78%" in text and "100%" in text  # mean and last utilization
    # Another team's user still gets a 404, not the figures.
    assert Client().get(f"/runs/{run.pk}/").status_code == 302
    page_html(cast.bob, f"/runs/{run.pk}/", status=404)


def test_compare_shows_energy_for_both_runs_in_page_api_and_csv(cast: Any) -> None:
    one = make_gang(cast.digits, name="one")
    two = make_gang(cast.digits, name="two", steps_done=200)
    _log(one, "throughput", [640.0])
    ids = f"{one.pk},{two.pk}"

    html = page_html(cast.alice, f"/compare/?runs={ids}")
    table = html[html.index('id="energy-table"'):html.index("</table>", html.index('id="energy-table"'))]
    for run, per_step, per_1k in ((one, "0.0389", "0.608"), (two, "0.0194", "–")):
        row = re.search(rf'<tr data-run="{run.pk}">(.*?)</tr>', table, re.S)
        assert row, table
        cells = [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r'<td class="num"[^>]*>(.*?)</td>', row.group(1), re.S)]
        assert cells == ["3.89", per_step, per_1k]

    client = Client()
    client.force_login(cast.alice)
    data = client.get(f"/api/v1/compare/?runs={ids}").json()
    energy = {r["id"]: r["energy"] for r in data["runs"]}
    assert energy[one.pk]["wh_per_step"] == pytest.approx(14_000 / 3600 / 100)
    assert energy[two.pk]["wh_per_step"] == pytest.approx(14_000 / 3600 / 200) and energy[two.pk]["wh_per_1k_samples"] is None

    rows = list(csv.DictReader(io.StringIO(client.get(f"/compare/export.csv?runs={ids}").content.decode())))
    assert [float(r["energy:wh_per_step"]) for r in rows] == pytest.approx([14_000 / 3600 / 100, 14_000 / 3600 / 200])
    assert [r["energy:wh_per_1k_samples"] for r in rows][1] == ""
