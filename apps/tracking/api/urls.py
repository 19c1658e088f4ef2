from django.urls import URLPattern, URLResolver, path

from apps.tracking.api import compare_views, views

urlpatterns: list[URLPattern | URLResolver] = [
    path("agent/metrics/", views.MetricIngestView.as_view(), name="agent-metrics"),
    path("agent/lineage/", views.LineageReportView.as_view(), name="agent-lineage"),
    path("runs/<int:pk>/metrics/", views.RunMetricsView.as_view(), name="run-metrics"),
    path("runs/<int:pk>/metrics/keys/", views.RunMetricKeysView.as_view(), name="run-metric-keys"),
    path("runs/<int:pk>/checkpoints/", views.RunCheckpointsView.as_view(), name="run-checkpoints"),
    path("runs/<int:run_pk>/checkpoints/<int:pk>/download/", views.CheckpointDownloadView.as_view(),
         name="run-checkpoint-download"),
    path("runs/<int:pk>/logs/", views.RunLogsView.as_view(), name="run-logs"),
    path("runs/<int:pk>/logs/download/", views.RunLogDownloadView.as_view(), name="run-logs-download"),
    path("runs/<int:pk>/history/", views.RunHistoryView.as_view(), name="run-history"),
    path("runs/<int:pk>/energy/", views.RunEnergyView.as_view(), name="run-energy"),
    path("runs/<int:pk>/environment/", views.RunEnvironmentView.as_view(), name="run-environment"),
    path("compare/", views.CompareView.as_view(), name="compare-api"),
    path("compare/views/", compare_views.SavedComparisonListView.as_view(), name="saved-comparison-list"),
    path("compare/views/<int:pk>/", compare_views.SavedComparisonDetailView.as_view(), name="saved-comparison-detail"),
]
