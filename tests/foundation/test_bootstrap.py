"""`manage.py bootstrap` (issue 26): migrations, pools, the shipped templates and the first admin;
never demo users; a second run changes nothing and records nothing.

The in-process tests use the suite's database; the subprocess test starts from an empty one (a
fresh SQLite file, or a fresh PostgreSQL database when DATABASE_URL names one), as an operator's
first start does, with the production settings.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.audit.models import AuditEvent
from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.recipes import SHIPPED
from apps.nodes.models import NodePool

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"TRAINYARD_ADMIN_USERNAME": "ops", "TRAINYARD_ADMIN_EMAIL": "ops@example.com",
         "TRAINYARD_ADMIN_PASSWORD": "a-long-admin-passphrase-7"}
DEMO_USERS = ("alice", "bob", "carol")


def _counts() -> dict[str, int]:
    return {model._meta.label: model._default_manager.count() for model in apps.get_models()}


def _bootstrap(**options: Any) -> str:
    out = StringIO()
    call_command("bootstrap", stdout=out, interactive=False, **options)
    return out.getvalue()


@pytest.fixture
def admin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ADMIN.items():
        monkeypatch.setenv(name, value)


def test_shipped_templates_are_at_least_the_six_the_issue_names() -> None:
    slugs = {slug for slug, *_ in SHIPPED}
    assert {"digits-classifier", "finetune", "ddp-train", "evaluate", "sweep", "custom"} <= slugs


def test_bootstrap_makes_pools_templates_and_an_admin_who_can_log_in(db: Any, admin_env: None) -> None:
    out = _bootstrap(pool=["a100:batch:2.40", "dev:interactive:0.5"])
    assert "created superuser ops" in out

    assert Client().login(username="ops", password=ADMIN["TRAINYARD_ADMIN_PASSWORD"])
    ops = get_user_model().objects.get(username="ops")
    assert ops.is_superuser and ops.is_staff and ops.email == "ops@example.com"
    pools = {p.name: (p.kind, str(p.price_per_device_hour)) for p in NodePool.objects.all()}
    assert pools == {"a100": ("batch", "2.4000"), "dev": ("interactive", "0.5000")}
    published = set(JobTemplate.objects.filter(published=True).values_list("slug", flat=True))
    assert published == {slug for slug, *_ in SHIPPED}
    assert not get_user_model().objects.filter(username__in=(*DEMO_USERS, "admin")).exists()
    assert get_user_model().objects.count() == 1
    for model in ("tenants.Team", "tenants.Project", "billing.Budget"):
        assert not apps.get_model(model).objects.exists(), model
    # Every object it made is in the audit log, attributed to the command.
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"node_pool.created", "template.create", "user.create"} <= actions
    assert set(AuditEvent.objects.values_list("actor_label", flat=True)) == {"manage.py bootstrap"}


def test_a_second_run_changes_nothing(db: Any, admin_env: None) -> None:
    _bootstrap(pool=["a100:batch:2.40"])
    first = _counts()
    out = _bootstrap(pool=["a100:batch:2.40"])
    second = _counts()
    changed = {label: (first[label], second[label]) for label in first if first[label] != second[label]}
    assert not changed, f"a second bootstrap changed these tables (first, second): {changed}"
    for part in ("migrations", "pools", "templates", "admin"):
        assert f"{part}: nothing to do" in out, out


def test_an_existing_pool_is_left_as_it_is(db: Any, admin_env: None) -> None:
    _bootstrap(pool=["a100:batch:2.40"])
    events = AuditEvent.objects.count()
    out = _bootstrap(pool=["a100:batch:3.00"])
    assert "left as it is" in out
    assert str(NodePool.objects.get(name="a100").price_per_device_hour) == "2.4000"
    assert AuditEvent.objects.count() == events


def test_without_pools_given_it_makes_the_templates_default_pool(db: Any, admin_env: None) -> None:
    _bootstrap()
    assert list(NodePool.objects.values_list("name", "kind")) == [("local", "batch")]


def test_pools_from_a_toml_or_json_file(db: Any, admin_env: None, tmp_path: Path) -> None:
    toml = tmp_path / "pools.toml"
    toml.write_text('[[pools]]\nname = "h100"\nkind = "batch"\nprice_per_device_hour = "3.10"\ndescription = "8x H100"\n')
    _bootstrap(config=str(toml))
    assert NodePool.objects.get(name="h100").description == "8x H100"
    config = tmp_path / "pools.json"
    config.write_text(json.dumps({"pools": [{"name": "a10", "price_per_device_hour": 0.8}]}))
    _bootstrap(config=str(config), pool=["t4:batch:0.2"])
    assert set(NodePool.objects.values_list("name", flat=True)) == {"h100", "a10", "t4"}


@pytest.mark.parametrize(("pool", "message"), [
    (["gpu:fast:1"], "kind must be one of"),
    (["gpu:batch:-1"], "must be >= 0"),
    (["gpu:batch:cheap"], "must be a number"),
    (["gpu:batch:1", "gpu:batch:2"], "more than once"),
    (["Not A Slug"], "Not A Slug"),
])
def test_bad_pools_are_refused_by_name(db: Any, admin_env: None, pool: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _bootstrap(pool=pool)
    assert not NodePool.objects.exists()


def test_no_admin_and_no_terminal_is_a_clear_error_before_anything_is_written(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ADMIN:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CommandError) as err:
        _bootstrap(pool=["a100:batch:1"])
    for name in ADMIN:
        assert name in str(err.value)
    assert not NodePool.objects.exists() and not JobTemplate.objects.exists()


def test_a_weak_admin_password_is_refused(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_ADMIN_USERNAME", "ops")
    monkeypatch.setenv("TRAINYARD_ADMIN_PASSWORD", "password")
    with pytest.raises(CommandError, match="admin password refused"):
        _bootstrap()
    assert not get_user_model().objects.exists()


# --- from an empty database, as a first start does ---------------------------------------------

COUNTS_SCRIPT = (
    "import json; from django.apps import apps; from django.contrib.auth import authenticate; "
    "print(json.dumps({'counts': {m._meta.label: m._default_manager.count() for m in apps.get_models()}, "
    "'login': authenticate(username='ops', password='" + ADMIN["TRAINYARD_ADMIN_PASSWORD"] + "') is not None, "
    "'users': sorted(apps.get_model('auth.User').objects.values_list('username', flat=True)), "
    "'pools': sorted(apps.get_model('nodes.NodePool').objects.values_list('name', flat=True)), "
    "'templates': sorted(apps.get_model('jobtemplates.JobTemplate').objects.filter(published=True)"
    ".values_list('slug', flat=True))}))"
)


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a production process on a database that has never been migrated."""
    from cryptography.fernet import Fernet

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update({"DJANGO_SETTINGS_MODULE": "portal.settings.production", "TRAINYARD_VAR_DIR": str(tmp_path / "var"),
                "TRAINYARD_SECRET_KEY": secrets.token_urlsafe(64), "TRAINYARD_SECRET_KEYS": Fernet.generate_key().decode()})
    base = os.environ.get("DATABASE_URL", "")
    if not base:
        (tmp_path / "var").mkdir()
        env.pop("DATABASE_URL", None)
        yield env
        return
    import psycopg

    name, admin_url = f"ty_boot_{uuid.uuid4().hex[:10]}", base.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + name
    try:
        yield env
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL)


def _state(env: dict[str, str]) -> dict[str, Any]:
    result = _manage(env, "shell", "-c", COUNTS_SCRIPT)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.database
def test_bootstrap_on_an_empty_database_then_again(empty_database: dict[str, str]) -> None:
    env = empty_database
    refused = _manage(env, "bootstrap", "--pool", "a100:batch:2.40")
    assert refused.returncode != 0
    assert "TRAINYARD_ADMIN_PASSWORD" in refused.stderr and "no terminal" in refused.stderr

    env = {**env, **ADMIN}
    first = _manage(env, "bootstrap", "--pool", "a100:batch:2.40")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "migrations: nothing to do" in first.stdout  # the refused run migrated already
    state = _state(env)
    assert state["login"], "the admin cannot log in"
    assert state["users"] == ["ops"]
    assert state["pools"] == ["a100"]
    assert state["templates"] == sorted(slug for slug, *_ in SHIPPED) and len(state["templates"]) >= 6

    second = _manage(env, "bootstrap", "--pool", "a100:batch:2.40")
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("nothing to do") == 4, second.stdout
    again = _state(env)
    changed = {k: (state["counts"][k], again["counts"][k]) for k in state["counts"] if state["counts"][k] != again["counts"][k]}
    assert not changed, f"a second bootstrap changed these tables (first, second): {changed}"
