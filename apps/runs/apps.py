from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self) -> None:
        from apps.runs.services.family import connect_signals

        connect_signals()
