"""`seed_demo` (run by every `make run`) creates the CONTRACT.md demo data and is idempotent."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command

from apps.tenants.models import Membership, Project, Role, Team
from apps.tenants.selectors import user_is_finance

DEMO_PASSWORD = "trainyard-demo"


def _counts() -> dict[str, int]:
    return {model._meta.label: model._default_manager.count() for model in apps.get_models()}


def test_seed_demo_creates_the_contract_data_and_is_idempotent(db: Any) -> None:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    first = _counts()
    call_command("seed_demo", stdout=StringIO())
    second = _counts()
    changed = {label: (first[label], second[label]) for label in first if first[label] != second[label]}
    assert not changed, f"a second seed_demo changed these tables (first, second): {changed}"
    assert "alice" in out.getvalue() and DEMO_PASSWORD in out.getvalue()

    User = get_user_model()
    for name in ("alice", "bob", "carol", "admin"):
        user = User.objects.get(username=name)
        assert user.check_password(DEMO_PASSWORD), name
    assert User.objects.get(username="admin").is_superuser
    assert not User.objects.get(username="alice").is_staff
    assert user_is_finance(user=User.objects.get(username="carol"))
    assert not user_is_finance(user=User.objects.get(username="alice"))

    assert set(Team.objects.values_list("slug", flat=True)) >= {"vision", "nlp"}
    assert Project.objects.filter(team__slug="vision", slug="digits").exists()
    assert Project.objects.filter(team__slug="nlp", slug="tiny-lm").exists()
    roles = dict(Membership.objects.values_list("user__username", "team__slug"))
    assert roles.get("alice") == "vision" and roles.get("bob") == "nlp"
    assert not Membership.objects.filter(user__username="alice", team__slug="nlp").exists()
    assert Membership.objects.get(user__username="alice").role in (Role.ENGINEER, Role.ADMIN)


def test_seed_demo_history_prices_three_weeks_of_runs_once(db: Any) -> None:
    """`seed_demo --history` (what `make run` runs) adds finished runs on a retired node and
    their ledger, priced by the real accrual: each team's spend is its device-seconds × the
    demo price. A second run adds nothing; plain `seed_demo` adds no history."""
    from decimal import Decimal

    from django.db.models import Sum

    from apps.billing.history import HISTORY_NODE
    from apps.billing.models import UsageEntry
    from apps.nodes.models import Node
    from apps.runs.models import Attempt, Run

    call_command("seed_demo", stdout=StringIO())
    assert not UsageEntry.objects.exists() and not Run.objects.filter(family__startswith="demo-history").exists()
    out = StringIO()
    call_command("seed_demo", "--history", stdout=out)
    runs = Run.objects.filter(family__startswith="demo-history")
    assert runs.count() == 36 and "36 finished demo runs" in out.getvalue()
    assert set(runs.values_list("status", flat=True)) <= {"succeeded", "failed", "cancelled"}
    # Every one says why it ended, on the run and its attempt: a failed run without a reason looks broken.
    assert all(r.status_reason.startswith("demo history: ") for r in runs)
    failed = Attempt.objects.filter(run__in=runs, run__status="failed")
    assert failed.exists() and all(a.exit_code == 1 and "exited with code 1" in a.reason for a in failed)
    assert Node.objects.get(hostname=HISTORY_NODE).state == "offline"
    for team in ("vision", "nlp"):
        attempts = Attempt.objects.filter(run__project__team__slug=team, run__family__startswith="demo-history")
        device_hours = sum((a.ended_at - a.started_at).total_seconds() * a.run.devices_per_node for a in attempts) / 3600
        spent = UsageEntry.objects.filter(team__slug=team).aggregate(s=Sum("cost"))["s"]
        assert spent > 0 and abs(spent - Decimal(device_hours) * Decimal("0.50")) < Decimal("0.05"), (team, spent, device_hours)
    before = _counts()
    call_command("seed_demo", "--history", stdout=StringIO())
    assert _counts() == before


def test_seed_demo_history_does_not_make_a_short_run_look_an_hour_long(db: Any) -> None:
    """The history stands for long GPU runs at the template's maximum steps. A demo user's run at
    the default steps must be predicted from seconds per step, not as one of those hour-long
    runs: otherwise every queued run's estimate on `make run` is out by most of an hour."""
    from apps.jobtemplates.models import JobTemplate
    from apps.runs.models import Run
    from apps.scheduling.selectors import run_predicted_runtime

    call_command("seed_demo", "--history", stdout=StringIO())
    template = JobTemplate.objects.get(slug="digits-classifier", published=True)
    history = Run.objects.filter(family="demo-history-digits", status="succeeded")
    assert history.exists() and all(r.params["steps"] == 100_000 for r in history)
    project = Project.objects.get(team__slug="vision", slug="digits")
    run = Run(project=project, template=template, pool=history[0].pool, params={"steps": 300}, nodes=1, devices_per_node=1,
              max_runtime_s=1800)
    typical = sorted((r.finished_at - r.started_at).total_seconds() for r in history)[len(history) // 2]
    assert run_predicted_runtime(run=run) == pytest.approx(typical * 300 / 100_000, rel=0.3)


def test_seed_demo_predicts_a_long_local_run_at_this_machines_pace(db: Any) -> None:
    """The history ran in a retired GPU pool of its own; in pool local the demo smoke test and
    sweep (short runs, mostly start-up) give a fitted start-up and pace, so a demo user's long
    run is predicted at about what it takes here, not at the history's GPU-like hour."""
    from apps.jobtemplates.models import JobTemplate
    from apps.nodes.models import NodePool
    from apps.runs.models import Run
    from apps.scheduling.selectors import run_predicted_runtime
    from apps.tracking.seed import SECONDS_PER_STEP, START_UP_S

    call_command("seed_demo", "--history", stdout=StringIO())
    local = NodePool.objects.get(name="local")
    assert not Run.objects.filter(family__startswith="demo-history", pool=local).exists()
    template = JobTemplate.objects.get(slug="digits-classifier", published=True)
    project = Project.objects.get(team__slug="vision", slug="digits")
    run = Run(project=project, template=template, pool=local, params={"steps": 40_000}, nodes=1, devices_per_node=1,
              max_runtime_s=1800)
    assert run_predicted_runtime(run=run) == pytest.approx(START_UP_S + 40_000 * SECONDS_PER_STEP, rel=0.1)


def test_seed_demo_sweep_is_a_consistent_finished_run(db: Any) -> None:
    """The demo sweep (top of the runs list on `make run`) reads like runs that really ran: the
    digits template with parameters its schema accepts, start and finish times, and metric points
    stamped between them."""
    from apps.runs.models import Run
    from apps.runs.services.params import params_resolve
    from apps.tracking.models import MetricPoint

    call_command("seed_demo", stdout=StringIO())
    runs = list(Run.objects.filter(family="demo-lr-sweep").order_by("started_at"))
    assert len(runs) == 3
    for run in runs:
        assert run.template.slug == "digits-classifier" and run.status == "succeeded"
        assert params_resolve(schema=run.template.param_schema, params=run.params) == run.params
        assert run.started_at is not None and run.finished_at is not None and run.started_at < run.finished_at
        assert run.tags["candidate"] == "baseline"
        times = [p.wall_time for p in MetricPoint.objects.filter(run=run)]
        assert times and min(times) >= run.started_at.timestamp() - 1 and max(times) <= run.finished_at.timestamp() + 1
    assert all(a.finished_at <= b.started_at for a, b in zip(runs, runs[1:], strict=False))


def test_seed_demo_runs_say_in_their_history_that_they_are_demo_data(db: Any) -> None:
    """Demo runs are written straight to the database, not through the services: each still gets
    one audit event, so its run page's History explains it rather than showing nothing."""
    from apps.audit.models import AuditEvent
    from apps.runs.models import Run
    from apps.tracking.history import run_history

    call_command("seed_demo", "--history", stdout=StringIO())
    runs = list(Run.objects.all())
    assert len(runs) > 3
    events = AuditEvent.objects.filter(action="run.seeded")
    assert sorted(int(e.object_id) for e in events) == sorted(r.pk for r in runs)
    assert {e.actor_label for e in events} == {"seed_demo"}
    assert all(e.team_id == r.project.team_id for r in runs for e in events if e.object_id == str(r.pk))
    rows, _ = run_history(run=runs[0], attempts=list(runs[0].attempts.all()))
    assert [(row.actor, row.what) for row in rows] == [("seed_demo", "written as demo data")]
    assert rows[0].detail.startswith(f"{runs[0].status} · demo data: seed_demo wrote it, attempts and all, straight to the database")


def test_seed_demo_quotas_do_not_over_commit_the_one_device_pool(db: Any) -> None:
    """A fresh stack's local pool is one agent with one CPU slot: the demo guarantees add up to
    that device, so finance's quota table points out no over-commitment (issue 29)."""
    from agents.config import parse_args
    from apps.billing.models import Quota
    from apps.billing.selectors import pool_commitments
    from apps.nodes.models import Device, Node, NodePool

    call_command("seed_demo", stdout=StringIO())
    pool = NodePool.objects.get(name="local")
    quotas = Quota.objects.filter(pool=pool)
    assert quotas.count() >= 2 and all(q.guaranteed_devices + q.borrow_limit >= 1 for q in quotas)
    slots = parse_args([]).slots  # what `make run`'s agent offers without a GPU
    node = Node.objects.create(pool=pool, hostname="laptop", agent_uid="laptop-uid")
    for index in range(slots):
        Device.objects.create(node=node, index=index, kind="cpu")
    commitment = pool_commitments(pool_ids=[pool.pk])[pool.pk]
    assert commitment.devices == slots and commitment.guaranteed <= commitment.devices and not commitment.over


def test_seed_demo_history_fills_finances_wh_per_step_and_final_metric(db: Any) -> None:
    """Finance's top runs are the history's (they cost most): each has steps, so "Wh / step" has a
    figure, and metric curves, so "final metric" names one; both read "–" before (issue 29)."""
    import re

    from django.test import Client

    from apps.tracking.models import MetricSummary

    call_command("seed_demo", "--history", stdout=StringIO())
    from apps.runs.models import Run

    runs = Run.objects.filter(family__startswith="demo-history")
    assert all(r.total_steps and 0 < r.steps_done <= r.total_steps for r in runs)
    assert set(MetricSummary.objects.filter(run__in=runs).values_list("run_id", flat=True)) == set(runs.values_list("pk", flat=True))
    client = Client()
    client.force_login(get_user_model().objects.get(username="carol"))
    html = client.get("/finance/").content.decode()
    table = html[html.index('id="top-runs"'):html.index("</table>", html.index('id="top-runs"'))]
    rows = re.findall(r"<tr><td>.*?</tr>", table, re.S)
    assert rows, table
    for row in rows:
        wh = re.search(r'<td class="num wh-per-step"[^>]*>(.*?)</td>', row, re.S)
        assert wh and wh.group(1).strip() not in ("", "–"), row
        assert re.search(r"<td>(val_accuracy|loss)=[\d.]+</td></tr>", row), row
    counts = MetricSummary.objects.count()
    call_command("seed_demo", "--history", stdout=StringIO())
    assert MetricSummary.objects.count() == counts


def test_seed_demo_runs_on_a_fresh_stack_are_minutes_old_not_an_hour(db: Any) -> None:
    """The demo smoke test and sweep end as they are seeded: a fresh stack's runs list says
    "2 minutes ago", not "1 hour ago" (issue 29). They stay one after the other, none in the future."""
    import re
    from datetime import timedelta

    from django.test import Client
    from django.utils import timezone

    from apps.runs.models import Run

    before = timezone.now()
    call_command("seed_demo", stdout=StringIO())
    runs = list(Run.objects.filter(family__in=["demo-lr-sweep", "demo-smoke-test"]).order_by("started_at"))
    assert len(runs) == 4
    assert all(before - timedelta(minutes=5) <= r.created_at <= r.started_at < r.finished_at <= timezone.now() for r in runs)
    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    html = client.get("/runs/?q=digits").content.decode()
    ages = re.findall(r"<td title=\"[^\"]+\">([^<]+) ago</td>", html)
    assert ages and all("hour" not in a and "day" not in a for a in ages), ages
