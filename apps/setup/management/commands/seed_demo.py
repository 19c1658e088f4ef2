"""Demo data for `make run`: teams, projects, users, the local pool, templates, budgets.

Idempotent: running it again changes nothing that is already there. Other apps contribute
their part through DEMO_SEEDERS (registered in their AppConfig.ready), so this command does
not import them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.audit.context import acting_as
from apps.core.seeding import DEMO_HISTORY_SEEDERS, DEMO_SEEDERS
from apps.tenants.models import Project, Role, Team
from apps.tenants.selectors import FINANCE_GROUP
from apps.tenants.services import membership_set, project_create, team_create

DEMO_PASSWORD = "trainyard-demo"  # demo only; production never runs this command


class Command(BaseCommand):
    help = "Create the demo teams, users, pool, templates and budgets (idempotent)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--history", action="store_true",
                            help="Also three weeks of finished runs and their spend (for `make run`; tests leave it out).")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic(), acting_as(label="seed_demo"):
            users = self._users()
            teams = {}
            for slug, name, project_slug, project_name in [
                ("vision", "Vision", "digits", "Digits classifier"),
                ("nlp", "NLP", "tiny-lm", "Tiny language model"),
            ]:
                team = Team.objects.filter(slug=slug).first() or team_create(slug=slug, name=name)
                teams[slug] = team
                if not Project.objects.filter(team=team, slug=project_slug).exists():
                    project_create(team=team, slug=project_slug, name=project_name)
            membership_set(team=teams["vision"], user=users["alice"], role=Role.ADMIN)
            membership_set(team=teams["nlp"], user=users["bob"], role=Role.ADMIN)
            for seeder in DEMO_SEEDERS:
                seeder(users=users, teams=teams, stdout=self.stdout)
        if options.get("history"):
            with acting_as(label="seed_demo"):
                for history in DEMO_HISTORY_SEEDERS:
                    history(users=users, stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS(f"Demo data ready. Logins: alice, bob, carol, admin (password {DEMO_PASSWORD})"))

    def _users(self) -> dict[str, Any]:
        User = get_user_model()
        users = {}
        for name, superuser in [("alice", False), ("bob", False), ("carol", False), ("admin", True)]:
            user = User.objects.filter(username=name).first()
            if user is None:
                user = User(username=name, email=f"{name}@example.com", is_staff=superuser, is_superuser=superuser)
                user.set_password(DEMO_PASSWORD)
                user.save()
            users[name] = user
        finance, _ = Group.objects.get_or_create(name=FINANCE_GROUP)
        users["carol"].groups.add(finance)
        return users
