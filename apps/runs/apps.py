from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self) -> None:
        # Registered now, not on a worker's autodiscovery: lower layers queue tasks by name
        # (signature("runs.checkpoint_verify")), and eager Celery (tests) runs only known tasks.
        from apps.runs import tasks  # noqa: F401
        from apps.runs.services.family import connect_signals

        connect_signals()
