from __future__ import annotations

from django.apps import AppConfig


class MlflowApiConfig(AppConfig):
    name = "apps.mlflow_api"
    label = "mlflow_api"
