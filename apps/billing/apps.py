from __future__ import annotations

from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"

    def ready(self) -> None:
        from apps.billing import history, seed, services, views
        from apps.core.seeding import DEMO_HISTORY_SEEDERS, DEMO_SEEDERS
        from apps.runs.services.submit import ADMISSION_CHECKS
        from apps.tenants.views import PROJECT_PANELS

        if seed.seed_billing not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed.seed_billing)
        if history.seed_history not in DEMO_HISTORY_SEEDERS:
            DEMO_HISTORY_SEEDERS.insert(0, history.seed_history)  # the runs first; others add to them (tracking: metrics)
        if views.project_budget_panel not in PROJECT_PANELS:
            PROJECT_PANELS.append(views.project_budget_panel)
        if services.budget_admission_check not in ADMISSION_CHECKS:
            ADMISSION_CHECKS.append(services.budget_admission_check)
