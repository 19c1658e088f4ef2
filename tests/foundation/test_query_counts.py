"""Pages and downloads that a team with real amounts of data uses must not read more as the data
grows: the same number of queries for 3 rows as for 30 (no query per row), and sums worked out
by the database rather than by reading every ledger entry back.

Found with bench/scale_pages.py (5,000 runs, 50,000 ledger entries, ...): the ledger CSV made one
query per entry (13 s for 50,000); the finance console and /budgets/ a round of queries and a
runtime-history load per project, and added the month's ledger up in Python four times over; the
new-run form asked for the user's role once per project. Query counts only, never timings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing import selectors
from apps.billing.models import EntryKind, UsageEntry
from apps.billing.services import budget_create
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, AttemptStatus, Run, RunStatus
from apps.tenants.models import Project
from apps.tenants.services import project_create
from tests.billing.helpers import make_attempt, make_pool, make_run

pytestmark = pytest.mark.django_db


def _month_start() -> datetime:
    """The start of today (UTC): in this month, the finance console's default period, and an hour of
    one-minute entries from it stays within one day. Starting a few hours back instead put 30 minutes
    of entries across midnight when the suite ran just after it, so one project had two days to sum."""
    return timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _entries(run: Run, attempt: Attempt, *, count: int, start: datetime, outcome: str) -> None:
    """`count` one-minute accruals of a cent each, then the attempt's close entry."""
    common = {"attempt": attempt, "run": run, "project": run.project, "team": run.project.team, "pool": run.pool,
              "template": run.template, "devices": 1, "price_per_device_hour": Decimal("0.60")}
    rows = [UsageEntry(kind=EntryKind.ACCRUAL, period_start=start + timedelta(minutes=i), period_end=start + timedelta(minutes=i + 1),
                       device_seconds=Decimal("60"), cost=Decimal("0.01"), energy_kwh=Decimal("0.001"), co2_g=Decimal("0.4"), **common)
            for i in range(count)]
    end = start + timedelta(minutes=count)
    rows.append(UsageEntry(kind=EntryKind.CLOSE, period_start=end, period_end=end, outcome=outcome, **common))
    UsageEntry.objects.bulk_create(rows)


def _ledger(project: Project, pool: NodePool, *, per_run: int, runs: int = 3) -> None:
    """`runs` finished runs in two families (one failed), each with `per_run` accruals."""
    start = _month_start()
    for i in range(runs):
        status = RunStatus.FAILED if i == 0 else RunStatus.SUCCEEDED
        run = make_run(project, pool, status=status, family=f"fam-{i % 2}")
        attempt = make_attempt(run, started_at=start, ended_at=start + timedelta(hours=1),
                               status=AttemptStatus.FAILED if status == RunStatus.FAILED else AttemptStatus.SUCCEEDED)
        _entries(run, attempt, count=per_run, start=start, outcome=attempt.status)


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        if getattr(response, "streaming", False):
            b"".join(response.streaming_content)
        assert response.status_code == 200, (url, response.status_code)
    return len(ctx.captured_queries)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@contextmanager
def _rows_read() -> Iterator[Callable[[], int]]:
    """Counts the rows the database hands back (every fetch of every cursor) while open."""
    seen = [0]

    def counted(name: str) -> Callable[..., Any]:
        def fetch(self: CursorWrapper, *args: Any) -> Any:
            with self.db.wrap_database_errors:
                got = getattr(self.cursor, name)(*args)
            seen[0] += (got is not None) if name == "fetchone" else len(got)
            return got
        return fetch

    with pytest.MonkeyPatch.context() as patch:
        for name in ("fetchone", "fetchmany", "fetchall"):
            patch.setattr(CursorWrapper, name, counted(name), raising=False)
        yield lambda: seen[0]


# --- the ledger download ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/finance/ledger.csv", "/api/v1/finance/ledger.csv"])
def test_ledger_csv_queries_do_not_grow_with_entries(cast: Any, url: str) -> None:
    pool = make_pool("local")
    client = _client(cast.carol)
    _ledger(cast.digits, pool, per_run=1)
    few = _queries(client, url)
    assert UsageEntry.objects.count() == 6
    _ledger(cast.tinylm, pool, per_run=10)
    many = _queries(client, url)
    assert UsageEntry.objects.count() == 6 + 33
    assert many == few, f"{url}: {few} queries for 6 entries, {many} for 39 (one per entry?)"
    lines = b"".join(client.get(url).streaming_content).decode().splitlines()
    assert len(lines) == 1 + 39
    assert sum(",vision/digits," in line for line in lines) == 6 and sum(",nlp/tiny-lm," in line for line in lines) == 33


# --- budgets of every project: the finance console and /budgets/ ------------------------------------


def _projects_with_budgets(cast: Any, pool: NodePool, count: int) -> None:
    """`count` more vision projects, each with its own budget, spend this month and a queued run."""
    start = _month_start()
    for i in range(count):
        project = project_create(team=cast.vision, slug=f"p{Project.objects.count()}-{i}", name=f"P {i}")
        budget_create(team=cast.vision, project=project, amount="50.00")
        run = make_run(project, pool, status=RunStatus.SUCCEEDED)
        attempt = make_attempt(run, started_at=start, ended_at=start + timedelta(hours=1))
        _entries(run, attempt, count=2, start=start, outcome=AttemptStatus.SUCCEEDED)
        make_run(project, pool, status=RunStatus.QUEUED, max_runtime_s=7200)


@pytest.mark.parametrize(("who", "url"), [("carol", "/finance/"), ("alice", "/budgets/")])
def test_budget_pages_queries_do_not_grow_with_projects(cast: Any, who: str, url: str) -> None:
    pool = make_pool("local", prices=[(timezone.now() - timedelta(days=400), "1.00")])
    client = _client(getattr(cast, who))
    _projects_with_budgets(cast, pool, 2)
    few = _queries(client, url)
    _projects_with_budgets(cast, pool, 10)
    many = _queries(client, url)
    assert many == few, f"{url}: {few} queries with 2 projects' budgets, {many} with 12 (a round per project?)"


def test_budget_status_of_many_projects_is_each_ones_own(cast: Any) -> None:
    """Read together, each project still gets its own budget (or its team's), its own spend and
    the reservations of its own scope's unfinished runs."""
    pool = make_pool("local", prices=[(timezone.now() - timedelta(days=400), "1.00")])
    start = _month_start()
    other = project_create(team=cast.vision, slug="other", name="Other")  # under the vision team budget
    budget_create(team=cast.vision, project=cast.digits, amount="100.00")
    team_budget = budget_create(team=cast.vision, project=None, amount="500.00")
    for project, count in [(cast.digits, 3), (other, 5), (cast.tinylm, 7)]:  # tiny-lm: no budget at all
        run = make_run(project, pool, status=RunStatus.SUCCEEDED)
        attempt = make_attempt(run, started_at=start, ended_at=start + timedelta(hours=1))
        _entries(run, attempt, count=count, start=start, outcome=AttemptStatus.SUCCEEDED)
        make_run(project, pool, status=RunStatus.QUEUED, max_runtime_s=3600 * count)
    projects = list(Project.objects.select_related("team").order_by("pk"))
    together = selectors.projects_budget_status(projects=projects)
    for project in projects:
        alone = selectors.project_budget_status(project=project)
        status = together[project.pk]
        assert (status.budget, status.spent, status.reserved, status.burndown) == (alone.budget, alone.spent, alone.reserved,
                                                                                   alone.burndown)
    digits, others, tinylm = (together[p.pk] for p in (cast.digits, other, cast.tinylm))
    assert digits.budget is not None and digits.budget.project_id == cast.digits.pk and digits.spent == Decimal("0.03")
    # The team's budget counts the whole team: digits' spend and queued run as well as other's.
    assert others.budget == team_budget and others.spent == Decimal("0.08")
    assert others.reserved == selectors.budget_reserved(budget=team_budget) and others.reserved > digits.reserved > 0
    assert tinylm.budget is None and tinylm.spent == Decimal("0.07") and tinylm.reserved == 0
    assert digits.burndown[-1] == (f"{timezone.now():%Y-%m-%d}", Decimal("0.03"))


# --- finance sums are the database's --------------------------------------------------------------


def _finance_figures(entries: Any) -> dict[str, Any]:
    return {
        **{group: selectors.spend_by(entries=entries, group_by=group) for group in selectors.GROUPS},
        "families": selectors.family_costs(entries=entries),
        "waste": selectors.waste_by_outcome(entries=entries),
    }


def test_finance_sums_read_groups_not_entries(cast: Any) -> None:
    pool = make_pool("local")
    _ledger(cast.digits, pool, per_run=3)
    _ledger(cast.tinylm, pool, per_run=30)
    figures = {}
    read = {}
    for project in (cast.digits, cast.tinylm):
        entries = selectors.ledger_filter(params={"period": "all", "project": str(project.pk)})[0]
        with _rows_read() as rows:
            figures[project.slug] = _finance_figures(entries)
        read[project.slug] = rows()
    assert read["tiny-lm"] <= read["digits"], (
        f"the finance sums read {read['digits']} rows for 12 entries and {read['tiny-lm']} for 93 (every entry?)")
    # ... and they are the right sums: three runs (one failed) in families fam-0 (two runs) and fam-1.
    big = figures["tiny-lm"]
    assert big["team"]["rows"] == [{"key": cast.nlp.pk, "label": "nlp", "cost": "0.90", "device_hours": 1.5, "energy_kwh": 0.09,
                                    "co2_g": 36.0}]
    assert [len(big[g]["rows"]) for g in ("project", "pool", "template")] == [1, 1, 1]
    assert big["project"]["rows"][0]["label"] == "nlp/tiny-lm" and big["template"]["rows"][0]["label"] == "digits"
    assert big["pool"]["rows"][0]["label"] == "local"
    points = big["team"]["series"][0]["points"]
    assert points[0][0] == f"{_month_start():%Y-%m-%d}" and sum(cost for _, cost in points) == pytest.approx(0.90)
    assert [(f["family"], f["runs"], f["succeeded"], f["cost"]) for f in big["families"]] == [
        ("fam-0", 2, 1, Decimal("0.60")), ("fam-1", 1, 1, Decimal("0.30"))]
    assert big["waste"] == [{"outcome": "failed", "cost": Decimal("0.30")}]
    assert figures["digits"]["waste"] == [{"outcome": "failed", "cost": Decimal("0.03")}]


# --- the new-run form -----------------------------------------------------------------------------


def test_new_run_form_queries_do_not_grow_with_projects(cast: Any) -> None:
    """The form offers every project the user may submit to: the role is asked per team."""
    client = _client(cast.alice)
    few = _queries(client, "/runs/new/")
    for i in range(10):
        project_create(team=cast.vision, slug=f"more-{i}", name=f"More {i}")
    many = _queries(client, "/runs/new/")
    assert many == few, f"/runs/new/: {few} queries with 1 project, {many} with 11 (one role query per project?)"
    page = client.get("/runs/new/").content.decode()
    assert all(f"vision/more-{i}" in page for i in range(10)) and "nlp/tiny-lm" not in page
