from __future__ import annotations

from django.urls import URLPattern, URLResolver, path, re_path

from apps.mlflow_api import artifacts, views

app_name = "mlflow_api"

# Paths as MLflow's client builds them from MLFLOW_TRACKING_URI=<portal>/mlflow.
urlpatterns: list[URLPattern | URLResolver] = [
    path("api/2.0/mlflow/<path:endpoint>", views.tracking_endpoint, name="tracking"),
    path("api/2.0/mlflow-artifacts/artifacts", artifacts.ArtifactsView.as_view(), name="artifacts-list"),
    path("api/2.0/mlflow-artifacts/artifacts/<path:path>", artifacts.ArtifactsView.as_view(), name="artifacts"),
    path("api/3.0/mlflow/server-info", views.server_info, name="server-info"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]
