from __future__ import annotations

from django.apps import AppConfig


class MlflowApiConfig(AppConfig):
    name = "apps.mlflow_api"
    label = "mlflow_api"

    def ready(self) -> None:
        from apps.mlflow_api.services import TRACKED_POOL, TRACKED_POOL_REASON
        from apps.nodes.closed import CLOSED_POOLS, closed_pool_admission_check
        from apps.runs.services.submit import ADMISSION_CHECKS

        # The tracked pool holds what MLflow clients log; no submission may wait in it.
        CLOSED_POOLS[TRACKED_POOL] = TRACKED_POOL_REASON
        if closed_pool_admission_check not in ADMISSION_CHECKS:
            ADMISSION_CHECKS.insert(0, closed_pool_admission_check)  # before budget: the pool is the refusal
