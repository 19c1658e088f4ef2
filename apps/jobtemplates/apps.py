from django.apps import AppConfig


class JobtemplatesConfig(AppConfig):
    name = "apps.jobtemplates"
    label = "jobtemplates"

    def ready(self) -> None:
        from apps.core.seeding import DEMO_SEEDERS
        from apps.jobtemplates.recipes import seed_templates

        if seed_templates not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed_templates)
