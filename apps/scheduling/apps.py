from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "apps.scheduling"
    label = "scheduling"

    def ready(self) -> None:
        # "scheduling.pass" is queued by name from below (runs, nodes): registered here, eager Celery finds it.
        # Billing's admission prices runs by predicted runtime, which only the scheduler knows;
        # a pool's policy JSON is checked on save against the options only the scheduler has.
        from apps.nodes.models import POLICY_CHECKS
        from apps.runs.services.runtime import runtime_estimator_register
        from apps.scheduling import tasks  # noqa: F401
        from apps.scheduling.pool_policy import policy_error
        from apps.scheduling.snapshot import runtime_estimator

        runtime_estimator_register(runtime_estimator)
        if policy_error not in POLICY_CHECKS:
            POLICY_CHECKS.append(policy_error)
