"""The fixed cast every test can use, and the real services tests need (Redis, a live stack).

The cast (healthchecks' alice/bob/charlie idea): alice is an engineer-admin of team vision,
bob of team nlp, victor a viewer in vision, carol finance, and an admin superuser.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from apps.tenants.models import Project, Role, Team
from apps.tenants.selectors import FINANCE_GROUP
from apps.tenants.services import membership_set, project_create, team_create

pytest_plugins = ["tests.fixtures.services", "tests.fixtures.live", "tests.fixtures.browser"]


class Cast:
    def __init__(self, django_user_model: Any) -> None:
        User = django_user_model
        self.vision: Team = team_create(slug="vision", name="Vision")
        self.nlp: Team = team_create(slug="nlp", name="NLP")
        self.digits: Project = project_create(team=self.vision, slug="digits", name="Digits")
        self.tinylm: Project = project_create(team=self.nlp, slug="tiny-lm", name="Tiny LM")
        self.alice = User.objects.create_user("alice", "alice@example.com", "pw-alice-123456")
        self.bob = User.objects.create_user("bob", "bob@example.com", "pw-bob-1234567")
        self.victor = User.objects.create_user("victor", "victor@example.com", "pw-victor-12345")
        self.carol = User.objects.create_user("carol", "carol@example.com", "pw-carol-123456")
        self.outsider = User.objects.create_user("oscar", "oscar@example.com", "pw-oscar-123456")
        self.admin = User.objects.create_superuser("admin", "admin@example.com", "pw-admin-123456")
        membership_set(team=self.vision, user=self.alice, role=Role.ADMIN)
        membership_set(team=self.nlp, user=self.bob, role=Role.ADMIN)
        membership_set(team=self.vision, user=self.victor, role=Role.VIEWER)
        self.carol.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])

    def client(self, user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client


@pytest.fixture
def cast(db: Any, django_user_model: Any) -> Cast:
    return Cast(django_user_model)


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--database-only", action="store_true",
                     help="run only the tests that use a database (Django's test database, or a live stack's): "
                          "the rest cannot differ by database (CI's SQLite pass)")


def pytest_configure(config: Any) -> None:
    """Agents started by tests run jobs as the test's own user (CI runs as root): a per-job user
    could not reach the job scripts in pytest's private temporary folders. tests/agents/test_isolation*
    start their agents with --isolation users."""
    os.environ.setdefault("TRAINYARD_AGENT_ISOLATION", "none")
    os.environ.setdefault("TRAINYARD_AGENT_SINGLE_TENANT", "1")


# Files that share something of the host's and so never run beside each other under xdist:
# the session's Slurm cluster (and its munged), and the per-job Unix users, cgroups and dockerd;
# and the heaviest trainings.
SHARED_GROUPS = {
    "tests/slurm/test_cluster.py": "slurm", "tests/slurm/test_slurm_pool.py": "slurm",
    "tests/agents/test_isolation.py": "host", "tests/agents/test_isolation_live.py": "host",
    "tests/agents/test_container_live.py": "host",
    # The two preemption files train several real models each: side by side on CI's 2 cores their
    # resumed runs ran past the tests' timeouts (session 25's CI), so they take turns.
    "tests/scheduling/test_django_integration.py": "preemption", "tests/scheduling/test_demotion_live.py": "preemption",
}


def group_of(nodeid: str) -> str:
    """A test's unit of work under xdist: its file, or the shared group its file is in."""
    path = nodeid.split("::", 1)[0]
    return SHARED_GROUPS.get(path, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """`--dist loadgroup` with our groups. Not xdist_group marks: pytest 9 keeps a node's id in
    `_id`, and xdist 3.8 still writes the group suffix to `_nodeid`, so its marks are lost."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return FileGroupScheduling(config, log)


def _kind(item: Any) -> int:
    """0 for the trace replays, 1 for tests with real processes or a browser, 2 for the rest."""
    if item.get_closest_marker("trace"):
        return 0
    return 1 if any(item.get_closest_marker(m) for m in ("live", "process", "browser")) else 2


@pytest.hookimpl
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Tests with real processes get one retry: they race real timeouts on a shared 2-core
    CI machine. A retry that passes is reported as a rerun (visible in the summary), and a
    deterministic failure still fails twice.

    Under `-n N --dist loadgroup` a file is one unit of work (its module fixtures are made once):
    see pytest_xdist_make_scheduler."""
    for item in items:
        if item.get_closest_marker("live") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))


def _uses_database(item: Any) -> bool:
    # db and transactional_db (and so live_server and the cast) stand on django_db_setup.
    fixtures = getattr(item, "fixturenames", ())
    return "django_db_setup" in fixtures or any(item.get_closest_marker(m) for m in ("django_db", "live", "database"))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_longest_first(config: Any, items: list[Any]) -> None:
    """The trace replays, then the files with real processes, go first (after pytest-django's
    own ordering, which it makes in a tryfirst hook), so that no worker is left alone with a
    replay at the end. Stable: within a kind the order stays pytest-django's."""
    if config.getoption("database_only"):
        keep: list[Any] = []
        drop: list[Any] = []
        for item in items:
            (keep if _uses_database(item) else drop).append(item)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    rank: dict[str, int] = {}
    for item in items:
        group = group_of(item.nodeid)
        rank[group] = min(rank.get(group, 2), _kind(item))
    items.sort(key=lambda item: rank[group_of(item.nodeid)])


# Why a retried test failed the first time: the plugin only names it, and a rerun that passed
# leaves nothing else to chase in a CI log.
_RERUN_REASONS: list[tuple[str, str]] = []
RERUN_TAIL_LINES = 40


def pytest_runtest_logreport(report: Any) -> None:
    if report.outcome == "rerun":
        _RERUN_REASONS.append((report.nodeid, report.longreprtext))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RERUN_REASONS:
        return
    terminalreporter.section("why tests were rerun (last lines of each first failure)")
    for nodeid, text in _RERUN_REASONS:
        terminalreporter.write_line(f"--- {nodeid}")
        for line in text.splitlines()[-RERUN_TAIL_LINES:]:
            terminalreporter.write_line(line)
