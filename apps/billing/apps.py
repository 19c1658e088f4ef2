from __future__ import annotations

import importlib

from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"

    def ready(self) -> None:
        from apps.billing import seed, services, views
        from apps.core.seeding import DEMO_SEEDERS
        from apps.tenants.views import PROJECT_PANELS

        if seed.seed_billing not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed.seed_billing)
        if views.project_budget_panel not in PROJECT_PANELS:
            PROJECT_PANELS.append(views.project_budget_panel)
        try:
            submit = importlib.import_module("apps.runs.services.submit")
        except ModuleNotFoundError:
            return  # the runs app has no submit service yet; nothing to hook into
        checks = submit.ADMISSION_CHECKS
        if services.budget_admission_check not in checks:
            checks.append(services.budget_admission_check)
