"""First start of a production install: migrations, node pools, the shipped templates and the
first admin. Never demo users. Idempotent: a part already done says "nothing to do" and writes
no row and no audit event.

Pools come from `--pool name:kind:price` flags and/or a JSON or TOML file (`--config`):
``{"pools": [{"name": "a100", "kind": "batch", "price_per_device_hour": "2.40"}]}``. With
neither and no pool yet, one batch pool `local` (the shipped templates' default) is made.
An existing pool is never changed here: prices are dated (billing), so the admin changes them.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import tomllib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.migrations.executor import MigrationExecutor

from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.core.errors import ServiceError
from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.recipes import SHIPPED, seed_templates
from apps.nodes.models import NodePool, PoolKind
from apps.nodes.services import pool_save

ADMIN_ENV = ("TRAINYARD_ADMIN_USERNAME", "TRAINYARD_ADMIN_EMAIL", "TRAINYARD_ADMIN_PASSWORD")
DEFAULT_POOL = "local:batch:0"
AUDIT_LABEL = "manage.py bootstrap"


@dataclass(frozen=True)
class PoolSpec:
    name: str
    kind: str
    price_per_device_hour: Decimal
    description: str = ""

    @classmethod
    def parse(cls, text: str) -> PoolSpec:
        """`name:kind:price` (kind and price may be left out: batch, 0)."""
        name, kind, price = (text.split(":") + ["", ""])[:3]
        return cls.build({"name": name, "kind": kind or PoolKind.BATCH, "price_per_device_hour": price or "0"})

    @classmethod
    def build(cls, data: dict[str, Any]) -> PoolSpec:
        unknown = set(data) - {"name", "kind", "price_per_device_hour", "description"}
        if unknown:
            raise CommandError(f"pool {data.get('name')!r}: unknown keys {sorted(unknown)}")
        name, kind = str(data.get("name", "")).strip(), str(data.get("kind", PoolKind.BATCH))
        if not name:
            raise CommandError("a pool needs a name (name:kind:price)")
        if kind not in PoolKind.values:
            raise CommandError(f"pool {name!r}: kind must be one of {', '.join(PoolKind.values)}, got {kind!r}")
        try:
            price = Decimal(str(data.get("price_per_device_hour", "0")))
        except InvalidOperation as exc:
            raise CommandError(f"pool {name!r}: price_per_device_hour must be a number") from exc
        if not price.is_finite() or price < 0:
            raise CommandError(f"pool {name!r}: price_per_device_hour must be >= 0")
        return cls(name=name, kind=kind, price_per_device_hour=price, description=str(data.get("description", "")))


@dataclass(frozen=True)
class AdminSpec:
    username: str
    email: str
    password: str


def pool_specs_load(*, flags: list[str], config: str | None) -> list[PoolSpec]:
    """The pools asked for, flags first; a name given twice is an error, not a silent pick."""
    specs = [PoolSpec.parse(text) for text in flags]
    if config:
        path = Path(config)
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--config {config}: {exc}") from exc
        pools = data.get("pools", []) if isinstance(data, dict) else None
        if not isinstance(pools, list) or not all(isinstance(p, dict) for p in pools):
            raise CommandError(f"--config {config}: expected a list of tables/objects under 'pools'")
        specs += [PoolSpec.build(p) for p in pools]
    names = [s.name for s in specs]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise CommandError(f"pool named more than once: {', '.join(doubled)}")
    return specs


class Command(BaseCommand):
    help = "Migrate, create node pools, publish the shipped templates and the first admin (idempotent; no demo data)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", action="append", default=[], metavar="NAME:KIND:PRICE",
                            help="A node pool to create if missing, e.g. a100:batch:2.40 (repeatable). "
                                 f"Default when no pool exists and none is given: {DEFAULT_POOL}.")
        parser.add_argument("--config", help="JSON or TOML file with a 'pools' list (name, kind, price_per_device_hour, description).")
        parser.add_argument("--no-input", "--noinput", action="store_false", dest="interactive",
                            help="Never prompt: the first admin comes from " + ", ".join(ADMIN_ENV) + ".")

    def handle(self, *args: Any, **options: Any) -> None:
        specs = pool_specs_load(flags=options["pool"], config=options["config"])
        self._migrate()
        admin, admin_note = self._admin_wanted(interactive=options["interactive"])
        with acting_as(label=AUDIT_LABEL):
            self._pools(specs)
            self._templates()
            self._admin(admin)
        if admin_note:
            self._say("admin", admin_note)
        self.stdout.write(self.style.SUCCESS("Bootstrap done."))

    def _say(self, part: str, text: str) -> None:
        self.stdout.write(f"{part}: {text}")

    def _migrate(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if not plan:
            self._say("migrations", "nothing to do")
            return
        call_command("migrate", interactive=False, verbosity=0)
        self._say("migrations", f"applied {len(plan)}")

    def _pools(self, specs: list[PoolSpec]) -> None:
        if not specs and not NodePool.objects.exists():
            specs = [PoolSpec.parse(DEFAULT_POOL)]
        created = 0
        for spec in specs:
            existing = NodePool.objects.filter(name=spec.name).first()
            if existing is None:
                with transaction.atomic():
                    try:
                        pool_save(pool=NodePool(name=spec.name, kind=spec.kind, description=spec.description,
                                                price_per_device_hour=spec.price_per_device_hour))
                    except (ServiceError, ValidationError) as exc:
                        raise CommandError(f"pool {spec.name!r}: {exc}") from exc
                created += 1
                self._say("pools", f"created {spec.name} ({spec.kind}, {spec.price_per_device_hour} per device-hour)")
            elif (existing.kind, existing.price_per_device_hour) != (spec.kind, spec.price_per_device_hour):
                self._say("pools", f"{spec.name} exists as {existing.kind} at {existing.price_per_device_hour}; left as it is "
                                   "(change kind or a dated price in the admin)")
        if not created:
            self._say("pools", f"nothing to do ({NodePool.objects.count()} in place)")

    def _templates(self) -> None:
        before = JobTemplate.objects.count()
        with transaction.atomic():
            seed_templates(users={}, teams={}, stdout=self.stdout)
        published = JobTemplate.objects.filter(published=True).values("slug").distinct().count()
        if JobTemplate.objects.count() == before:
            self._say("templates", f"nothing to do ({published} of {len(SHIPPED)} shipped templates published)")
        else:
            self._say("templates", f"{published} of {len(SHIPPED)} shipped templates published")

    def _admin_wanted(self, *, interactive: bool) -> tuple[AdminSpec | None, str]:
        """The admin to create, or None and why there is nothing to do. Asked before anything is
        written, so a missing password stops the command before it has half-run."""
        User = get_user_model()
        username = os.environ.get("TRAINYARD_ADMIN_USERNAME", "").strip()
        if username and User.objects.filter(username=username).exists():
            return None, f"nothing to do ({username} exists; its password is left as it is)"
        if not username and User.objects.filter(is_superuser=True).exists():
            return None, "nothing to do (a superuser exists)"
        email = os.environ.get("TRAINYARD_ADMIN_EMAIL", "").strip()
        password = os.environ.get("TRAINYARD_ADMIN_PASSWORD", "")
        if not (username and password):
            if not interactive or not sys.stdin.isatty():
                raise CommandError("no admin yet and no terminal to ask on: set " + ", ".join(ADMIN_ENV)
                                   + " (email may be empty), or run this command in a terminal")
            username, email, password = self._prompt(username, email)
        try:
            validate_password(password, User(username=username, email=email))
        except ValidationError as exc:
            raise CommandError("admin password refused: " + " ".join(exc.messages)) from exc
        return AdminSpec(username=username, email=email, password=password), ""

    def _prompt(self, username: str, email: str) -> tuple[str, str, str]:
        username = username or input("Admin username [admin]: ").strip() or "admin"
        email = email or input("Admin email (may be empty): ").strip()
        for _ in range(3):
            password = getpass.getpass("Admin password: ")
            if password and password == getpass.getpass("Admin password (again): "):
                return username, email, password
            self.stderr.write("The passwords are empty or differ; try again.")
        raise CommandError("no admin password given")

    def _admin(self, admin: AdminSpec | None) -> None:
        if admin is None:
            return
        User = get_user_model()
        with transaction.atomic():
            user = User.objects.create_superuser(admin.username, admin.email, admin.password)
            audit_record(action="user.create", target=user,
                         after={"username": user.get_username(), "email": admin.email, "is_superuser": True})
        self._say("admin", f"created superuser {admin.username}")
