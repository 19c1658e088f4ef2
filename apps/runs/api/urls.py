from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from apps.runs.api.views import AgentSnapshotDownloadView, CodeSnapshotViewSet, RunViewSet

router = SimpleRouter()
router.register("runs", RunViewSet, basename="run")
router.register("code-snapshots", CodeSnapshotViewSet, basename="code-snapshot")

urlpatterns: list[URLPattern | URLResolver] = [
    *router.urls,
    path("agent/snapshots/<str:sha256>/", AgentSnapshotDownloadView.as_view(), name="agent-snapshot"),
]
