"""The run page says what the run did in plain, consistent words: its recorded energy in a unit
that fits, no charts of readings nobody sent, a sweep's trials, parameters as JSON, no ETA for a
run that stopped, one time format and money as money, and the checkpoints retention deleted
folded into one line. Django's test client reads the page as
served and the JSON its script (static/tracking/run.js) reads; tests/tracking/test_browser.py
checks what the script makes of it in Chromium."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.audit.services import audit_record
from apps.jobtemplates.models import JobTemplate
from apps.runs.models import Assignment, Attempt, Checkpoint, EnergySample, Run, RunStatus
from apps.tracking import display, selectors
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_node, make_run

T = 1_700_000_000.0


def _page(user: Any, run: Run) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def _dd(html: str, element_id: str) -> str:
    """The text of the element with this id (a <dd> or <dt> of the page's cards)."""
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</d[dt]>', html, re.S)
    assert match, element_id
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def _finished(project: Any, *, status: str = RunStatus.SUCCEEDED, seconds: float = 1800, energy_j: float = 0.0,
              **fields: Any) -> tuple[Run, Attempt]:
    """A finished run with one attempt of `seconds` on one device, as the demo history writes
    them: the attempt's energy is recorded, the run's own total and its steps are not."""
    run = make_run(project, status=status, **fields)
    node, _ = make_node()
    end = timezone.now() - timedelta(hours=1)
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded" if status == RunStatus.SUCCEEDED else "cancelled",
                                     started_at=end - timedelta(seconds=seconds), ended_at=end, energy_j=energy_j)
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="exited")
    return run, attempt


# --- 1. energy: the recorded total, whether or not there are samples ----------------------------

def test_a_run_without_samples_shows_its_recorded_energy(cast: Any) -> None:
    run, _ = _finished(cast.digits, energy_j=527917.3, name="history")
    api = cast.client(cast.alice)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["energy"]["joules"] == pytest.approx(527917.3)
    energy = api.get(f"/api/v1/runs/{run.pk}/energy/").json()
    # What the page's script shows: the same total as the run API and the finance pages, with
    # no samples to chart (it says so, rather than that nothing was recorded).
    assert energy["total_j"] == pytest.approx(527917.3) and energy["devices"] == []
    assert energy["total_text"] == "147 Wh (0.1466 kWh)" and energy["unit"] == "Wh"
    assert _dd(_page(cast.alice, run), "run-energy") == "147 Wh (0.1466 kWh)"


def test_samples_give_the_total_when_none_is_recorded(cast: Any) -> None:
    run, attempt = _finished(cast.digits)
    node, _ = make_node()
    for i in range(3):
        EnergySample.objects.create(attempt=attempt, node=node, device_index=0, at=timezone.now() + timedelta(seconds=i),
                                    power_w=None, energy_j=100.0 * (i + 1))
    assert cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/energy/").json()["total_j"] == 300.0


# --- 2. charts only of what was reported, in a unit that fits -----------------------------------

def test_cpu_samples_carry_no_power_or_utilization_and_small_totals_read_in_joules(cast: Any) -> None:
    run, attempt = _finished(cast.digits, energy_j=477.0)
    Run.objects.filter(pk=run.pk).update(energy_j=477.0, energy_estimated=True)
    node, _ = make_node()
    start = timezone.now()
    for i in range(4):  # what the agent sends for a CPU: a whole-node reading, no watts, no utilization
        EnergySample.objects.create(attempt=attempt, node=node, device_index=-1, at=start + timedelta(seconds=i), power_w=None,
                                    utilization=None, energy_j=477.0 * (i + 1) / 4, estimated=True)
    energy = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/energy/").json()
    assert energy["power_reported"] is False and energy["utilization_reported"] is False
    assert (energy["unit"], energy["unit_j"], energy["total_text"]) == ("J", 1.0, "477 J")
    assert _dd(_page(cast.alice, Run.objects.get(pk=run.pk)), "run-energy") == "477 J, estimated"


def test_gpu_samples_report_power_and_large_totals_read_in_kwh(cast: Any) -> None:
    run, attempt = _finished(cast.digits)
    node, _ = make_node()
    start = timezone.now()
    for i in range(3):
        EnergySample.objects.create(attempt=attempt, node=node, device_index=0, at=start + timedelta(hours=i), power_w=300.0,
                                    utilization=None, energy_j=3.6e6 * (i + 1))
    energy = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/energy/").json()
    assert energy["power_reported"] is True and energy["utilization_reported"] is False
    assert (energy["unit"], energy["unit_j"], energy["total_text"]) == ("kWh", 3.6e6, "3.00 kWh")


def test_energy_units() -> None:
    assert display.energy_text(0) == "0 J"
    assert display.energy_text(26.641) == "26.6 J"
    assert display.energy_text(3599) == "3,599 J"
    assert display.energy_text(3600) == "1.00 Wh (0.001 kWh)"
    assert display.energy_text(527917.3) == "147 Wh (0.1466 kWh)"
    assert display.energy_text(4.5e7) == "12.5 kWh"
    assert display.energy_unit(2e9).name == "kWh"


# --- 3. a sweep parent lists its trials ----------------------------------------------------------

def _sweep(cast: Any) -> tuple[Run, list[Run]]:
    template = JobTemplate.objects.create(slug="track-sweep", version=1, title="Sweep", kind="sweep",
                                          entrypoint="trainyard:sweep-controller")
    parent = make_run(cast.digits, template=template, name="sweep s", status=RunStatus.SUCCEEDED, nodes=1, devices_per_node=0,
                      total_steps=3, steps_done=3, params={"space": {"lr": [0.1, 0.01, 0.001]}, "params": {"steps": 50}},
                      status_reason="3 of 3 runs succeeded", started_at=timezone.now() - timedelta(hours=2),
                      progress_at=timezone.now() - timedelta(minutes=1))
    trials = []
    for i, lr in enumerate((0.1, 0.01, 0.001)):
        trial, attempt = _finished(cast.digits, name=f"sweep s #{i + 1}", parent=parent, energy_j=3600.0,
                                   params={"lr": lr, "steps": 50, "amp": False}, total_steps=50, steps_done=50)
        metric_points_store(run_id=trial.pk, attempt=1, rows=[("val_accuracy", s, 0.5 + lr + s / 1000, 0, T + s) for s in range(50)])
        trials.append(trial)
    return parent, trials


def test_a_sweep_parent_lists_its_trials_with_links_and_a_comparison(cast: Any) -> None:
    parent, trials = _sweep(cast)
    html = _page(cast.alice, parent)
    section = html[html.index('id="sweep-trials"'):]
    section = section[:section.index("</section>")]
    for trial in trials:
        assert f'href="/runs/{trial.pk}/"' in section and trial.name in section
    assert f'href="/compare/?runs={",".join(str(t.pk) for t in trials)}"' in section
    # The parameter that varies is a column; the one that does not is left out. The final metric
    # is each trial's last val_accuracy.
    assert "<th>lr</th>" in section and "<th>steps</th>" not in section and "<th>amp</th>" not in section
    assert ">0.001<" in section and "val_accuracy (final)" in section and ">0.6490<" in section
    # Its figures are its trials': no steps, rate or devices of its own.
    assert _dd(html, "progress-steps") == "3 of 3 finished" and "steps/s" not in html
    assert _dd(html, "run-cost-label") == "Cost of its trials" and _dd(html, "run-cost") == "$3.00"
    assert "3.00 Wh" in html
    assert "node(s)" not in html and "× 0 device" not in html and "1 node × 1 device for each trial" in html
    assert "Not started yet." not in html and "its trials are the runs listed above" in html
    assert "No metrics reported yet." not in html and "A sweep reports no metrics of its own" in html


def test_an_unnamed_trial_is_labelled_as_on_every_other_page(cast: Any) -> None:
    parent, trials = _sweep(cast)
    Run.objects.filter(pk=trials[1].pk).update(name="")
    html = _page(cast.alice, parent)
    section = html[html.index('id="sweep-trials"'):]
    section = section[:section.index("</section>")]
    named, unnamed = trials[0].pk, trials[1].pk
    assert f'<a href="/runs/{named}/">#{named} sweep s #1</a>' in section
    assert f'<a href="/runs/{unnamed}/">#{unnamed}</a>' in section and f"run {unnamed}" not in section
    assert f'<a href="/runs/{unnamed}/">{display.run_label(pk=unnamed, name="")}</a>' in section


def test_a_trial_links_back_and_an_ordinary_run_has_no_trials(cast: Any) -> None:
    parent, trials = _sweep(cast)
    html = _page(cast.alice, trials[0])
    assert f'href="/runs/{parent.pk}/"' in html and 'id="sweep-trials"' not in html


# --- 4. params as JSON, not Python --------------------------------------------------------------

def test_params_and_the_jobs_lineage_read_as_json(cast: Any) -> None:
    run, attempt = _finished(cast.digits, params={"lr": 0.03, "amp": False, "resume": None, "classes": [0, 1], "arch": "mlp",
                                                  "model": {"hidden": 64, "bias": True}})
    Attempt.objects.filter(pk=attempt.pk).update(lineage={"deterministic": True, "split": [0.7, 0.3]})
    html = _page(cast.alice, run)
    params = html[html.index('id="run-params"'):]
    params = params[:params.index("</dl>")]
    assert '<dt class="mono">amp</dt><dd class="mono">false</dd>' in params
    assert '<dt class="mono">resume</dt><dd class="mono">null</dd>' in params
    assert '<dd class="mono">[0, 1]</dd>' in params and '<dd class="mono">mlp</dd>' in params
    assert "{&quot;bias&quot;: true, &quot;hidden&quot;: 64}" in params
    assert "False" not in html and "None" not in params and "&#x27;lr&#x27;" not in html
    assert '<dd class="mono">true</dd>' in html and '<dd class="mono">[0.7, 0.3]</dd>' in html


# --- 5. ETA and steps -----------------------------------------------------------------------------

def test_no_eta_for_a_run_that_stopped_and_no_zero_steps_for_one_that_never_said(cast: Any) -> None:
    cancelled, _ = _finished(cast.digits, status=RunStatus.CANCELLED, total_steps=1000, steps_done=200)
    html = _page(cast.alice, cancelled)
    assert _dd(html, "progress-eta") == "–" and _dd(html, "progress-steps") == "200 of 1000"
    failed, _ = _finished(cast.digits, status=RunStatus.FAILED)
    assert _dd(_page(cast.alice, failed), "progress-eta") == "–"
    history, _ = _finished(cast.digits)  # succeeded, but reported no steps (demo history)
    html = _page(cast.alice, history)
    assert _dd(html, "progress-eta") == "done" and _dd(html, "progress-steps") == "–"
    assert display.steps_text(steps_done=0, total_steps=300) == "0 of 300"


# --- 6. one time format, money and plurals --------------------------------------------------------

WHEN = r"[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d{2}:\d{2} [AP]M UTC"


def test_times_share_one_format_and_money_has_its_currency(cast: Any) -> None:
    run, attempt = _finished(cast.digits, devices_per_node=2, submitted_by=cast.alice)
    attempt.assignments.update(devices=[0, 1])
    audit_record(action="run.submit", target=run, team_id=cast.vision.pk, actor=cast.alice, after={"status": "queued"})
    html = _page(cast.alice, run)
    # Every time is a <time> the page's script puts in the viewer's zone, written alike.
    submitted = html[html.index('id="run-submitted"'):]
    assert re.match(rf'id="run-submitted"><time datetime="[^"]+" title="[^"]+">{WHEN}</time> by alice', submitted)
    attempts = html[html.index('id="attempt-rows"'):html.index('id="run-history"')]
    assert len(re.findall(rf"<time [^>]+>{WHEN}</time>", attempts)) == 2
    assert not re.search(r"\d{4}-\d{2}-\d{2}", re.sub(r"<[^>]+>", "", attempts)), "no ISO times in what people read"
    history = html[html.index('id="history-rows"'):]
    assert re.search(rf"<td><time [^>]+>{WHEN}</time></td>", history)
    # 30 minutes on two devices at 2.00 an hour, in dollars as the budget pages write them.
    assert _dd(html, "run-cost") == "$2.00"
    assert "1 node × 2 devices" in html and "node(s)" not in html
    keys = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/metrics/keys/").json()["run"]
    assert Decimal(keys["cost"]) == Decimal("2.00") and keys["cost_text"] == "$2.00"
    # One cost for the run everywhere: the page's, the run API's (and the ledger's device count).
    assert Decimal(cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/").json()["cost"]["amount"]) == Decimal("2.00")


def test_the_page_charges_the_devices_the_run_was_given_as_the_run_api_does(cast: Any) -> None:
    # Asked for 2 devices, placed on 1 (the ledger charges what an attempt was given): the page
    # used to multiply the wall time by the devices asked for, and said $2.00 beside the API's $1.00.
    run, _ = _finished(cast.digits, devices_per_node=2)
    api = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/").json()["cost"]["amount"]
    assert Decimal(api) == Decimal("1.00")
    assert _dd(_page(cast.alice, run), "run-cost") == "$1.00"


# --- 7. checkpoints: the kept ones listed, the ones retention deleted folded --------------------

def _checkpoints(run: Run, attempt: Attempt, steps: Any, *, deleted: bool) -> None:
    now = timezone.now()
    Checkpoint.objects.bulk_create([
        Checkpoint(run=run, attempt=attempt, step=step, file_name=f"step-{step}.pt", size=1536 * 1024, sha256=f"{step:064x}",
                   metrics={"loss": 2.0 / step, "acc": 0.5}, stored_path=f"checkpoints/{run.pk}/step-{step}.pt",
                   deleted_at=now if deleted else None)
        for step in steps])


def _card(html: str) -> str:
    card = html[html.index('id="checkpoints-card"'):]
    return card[:card.index("</details>") + 10 if "</details>" in card else card.index("</table>")]


def test_checkpoints_deleted_by_retention_fold_into_one_line(cast: Any) -> None:
    run, attempt = _finished(cast.digits, name="long")
    _checkpoints(run, attempt, [3010, 3020, 3030], deleted=False)
    kept_only = _page(cast.alice, run)
    _checkpoints(run, attempt, range(10, 3010, 10), deleted=True)  # keep-last-3 removed 300 before them
    html = _page(cast.alice, run)

    # The kept ones are rows, as before, with their download links.
    card = _card(html)
    kept = card[:card.index("</table>")]
    assert re.findall(r'<tr data-step="(\d+)">', kept) == ["3010", "3020", "3030"]
    assert kept.count(">download</a>") == 3 and "<td>1.5 MB</td>" in kept
    assert "acc=0.5  loss=6.645e-4" in kept and f'title="{3010:064x}"' in kept
    # The deleted ones are one line that says how many and which, folded, their rows not sent.
    summary = re.search(r'<details id="deleted-checkpoints" data-count="300">\s*<summary>(.*?)</summary>', card)
    assert summary and summary.group(1) == "300 deleted by retention (steps 10–3000)"
    assert len(re.findall(r"<tr data-step=", html)) == 3
    # So the page is as long as it was with only the three: it does not grow with what was deleted.
    assert len(html) - len(kept_only) < 600, len(html) - len(kept_only)

    # Unfolded, the card comes again with their rows (static/tracking/run.js swaps it in).
    client = Client()
    client.force_login(cast.alice)
    folded = client.get(f"/runs/{run.pk}/?partial=checkpoints").content.decode()
    assert _card(folded) == card
    response = client.get(f"/runs/{run.pk}/?partial=checkpoints&deleted=1")
    unfolded = response.content.decode()
    assert response.status_code == 200 and '<details id="deleted-checkpoints" data-count="300" open>' in unfolded
    gone = unfolded[unfolded.index('id="deleted-checkpoint-rows"'):]
    assert re.findall(r'<tr data-step="(\d+)">', gone) == [str(step) for step in range(10, 3010, 10)]
    assert gone.count('<span class="muted">removed</span>') == 300 and "download" not in gone
    # Polled while the run is active: an unchanged card costs a 304.
    etag = client.get(f"/runs/{run.pk}/?partial=checkpoints")["ETag"]
    again = client.get(f"/runs/{run.pk}/?partial=checkpoints", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304


def test_the_checkpoints_card_says_when_none_was_kept_and_is_scoped(cast: Any) -> None:
    run, attempt = _finished(cast.digits)
    assert "None: this run saved no checkpoint." in _card(_page(cast.alice, run))
    _checkpoints(run, attempt, [500], deleted=True)
    card = _card(_page(cast.alice, run))
    assert "None kept: retention deleted every one." in card and "<summary>1 deleted by retention (step 500)</summary>" in card
    outsider = Client()
    outsider.force_login(cast.bob)
    assert outsider.get(f"/runs/{run.pk}/?partial=checkpoints").status_code == 404
    assert Client().get(f"/runs/{run.pk}/?partial=checkpoints").status_code == 302  # to the login page


def test_checkpoint_figures_read_as_the_charts_pages_write_them() -> None:
    # As common.js's fmt() and bytes() write them.
    assert [display.metric_text(v) for v in (0.5, 2.0, 0.12345678, -3.25, 2e-5, 123456.0, 0, "NaN", None)] == [
        "0.5", "2", "0.1235", "-3.25", "2.000e-5", "1.235e+5", "0", "NaN", "–"]
    assert [display.size_text(n) for n in (512, 1536, 1536 * 1024, 3 * 1024**4)] == ["512 B", "1.5 KB", "1.5 MB", "3.0 TB"]
    assert display.deleted_checkpoints_text(count=2, first_step=10, last_step=20) == "2 deleted by retention (steps 10–20)"


# --- 8. the attempts: one selector for the table and the script -----------------------------------

def test_the_attempt_table_and_the_pages_script_read_the_same_attempts(cast: Any) -> None:
    run, first = _finished(cast.digits, status=RunStatus.FAILED)
    node, _ = make_node()
    second = Attempt.objects.create(run=run, number=2, status="failed", reason="lost its node", exit_code=137,
                                    resumed_from_step=40, started_at=first.ended_at)
    Assignment.objects.create(attempt=second, node=node, devices=[0], state="exited")
    html = _page(cast.alice, run)
    page_data = json.loads(re.search(r'<script id="run-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    rows = selectors.attempt_rows(run=run)
    timeline = selectors.attempt_timeline(run=run)
    # The script's copy is the table's rows with ISO times, as the history API also sends them.
    assert page_data["attempts"] == timeline == selectors.attempt_timeline(run=run, rows=rows)
    assert timeline == cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/history/").json()["attempts"]
    assert [a["start"] for a in timeline] == [r["start"].isoformat() for r in rows]
    assert timeline[1] == {"number": 2, "status": "failed", "reason": "lost its node", "nodes": [node.hostname],
                           "start": first.ended_at.isoformat(), "end": None, "exit_code": 137, "resumed_from_step": 40}
    table = html[html.index('id="attempt-rows"'):html.index('id="run-history"')]
    starts = re.findall(r'<time datetime="([^"]+)"', table)
    assert starts[0] == timeline[0]["start"] and starts[2] == timeline[1]["start"]
    assert f"<td>{node.hostname}</td>" in table and "lost its node" in table
