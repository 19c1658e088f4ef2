from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from apps.runs.api.views import AgentSnapshotDownloadView, AgentSnapshotLinkView, CodeSnapshotViewSet, RunViewSet

router = SimpleRouter()
# "api-" prefixes keep these names apart from the HTML pages' run-list / run-detail.
router.register("runs", RunViewSet, basename="api-run")
router.register("code-snapshots", CodeSnapshotViewSet, basename="api-code-snapshot")

urlpatterns: list[URLPattern | URLResolver] = [
    *router.urls,
    path("agent/snapshots/<str:sha256>/", AgentSnapshotDownloadView.as_view(), name="agent-snapshot"),
    path("agent/snapshots/<str:sha256>/download/", AgentSnapshotLinkView.as_view(), name="agent-snapshot-download"),
]
