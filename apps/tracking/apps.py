from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "apps.tracking"
    label = "tracking"

    def ready(self) -> None:
        from apps.core.seeding import DEMO_SEEDERS
        from apps.tracking.seed import seed_tracking

        if seed_tracking not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed_tracking)
