from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

API_APPS = ["accounts", "tenants", "audit", "fleet", "jobtemplates", "runs", "tracking", "scheduling", "billing", "webhooks",
            "vault", "artifacts", "registry", "notifications"]
PAGE_APPS = ["core", "accounts", "tenants", "audit", "fleet", "jobtemplates", "runs", "tracking", "scheduling", "billing", "webhooks",
             "vault", "artifacts", "registry", "notifications"]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    *[path("api/v1/", include(f"apps.{app}.api.urls")) for app in API_APPS],
    *[path("", include(f"apps.{app}.urls")) for app in PAGE_APPS],
    # The MLflow tracking REST API, at the paths MLflow's own client builds (MLFLOW_TRACKING_URI=<portal>/mlflow).
    path("mlflow/", include("apps.mlflow_api.urls")),
]

handler400 = "apps.core.errors.handler400"
handler403 = "apps.core.errors.handler403"
handler404 = "apps.core.errors.handler404"
handler500 = "apps.core.errors.handler500"
