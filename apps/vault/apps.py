from __future__ import annotations

from django.apps import AppConfig


class VaultConfig(AppConfig):
    name = "apps.vault"
    label = "vault"

    def ready(self) -> None:
        from apps.runs.services.submit import ADMISSION_CHECKS
        from apps.runs.views import SECRET_NAME_SOURCES
        from apps.tenants.views import PROJECT_PANELS
        from apps.vault import checks, selectors, services, views

        checks.register()
        if services.vault_admission_check not in ADMISSION_CHECKS:
            ADMISSION_CHECKS.append(services.vault_admission_check)
        if selectors.secret_names not in SECRET_NAME_SOURCES:
            SECRET_NAME_SOURCES.append(selectors.secret_names)
        if views.project_secrets_panel not in PROJECT_PANELS:
            PROJECT_PANELS.append(views.project_secrets_panel)
