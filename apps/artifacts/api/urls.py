from django.urls import URLPattern, URLResolver, path

from apps.artifacts.api import agent_views, views

urlpatterns: list[URLPattern | URLResolver] = [
    path("runs/<int:pk>/artifacts/", views.RunArtifactsView.as_view(), name="run-artifacts"),
    path("runs/<int:pk>/artifacts/<path:name>", views.RunArtifactFileView.as_view(), name="run-artifact-file"),
    path("agent/artifacts/", agent_views.AgentArtifactView.as_view(), name="agent-artifacts"),
    path("agent/artifacts/complete/", agent_views.AgentArtifactCompleteView.as_view(), name="agent-artifacts-complete"),
]
