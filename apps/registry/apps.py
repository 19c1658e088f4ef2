"""Registered models per project, their versions, aliases and evidence-based promotion."""
from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "apps.registry"
    label = "registry"

    def ready(self) -> None:
        from apps.billing.views import FINANCE_PANELS
        from apps.registry import views
        from apps.runs.panels import RUN_PANELS
        from apps.tenants.views import PROJECT_PANELS

        if views.project_models_panel not in PROJECT_PANELS:
            PROJECT_PANELS.append(views.project_models_panel)
        if views.finance_model_costs_panel not in FINANCE_PANELS:
            FINANCE_PANELS.append(views.finance_model_costs_panel)
        if views.run_register_panel not in RUN_PANELS:
            RUN_PANELS.append(views.run_register_panel)
