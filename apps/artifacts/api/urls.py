from django.urls import URLPattern, URLResolver, path

from apps.artifacts.api import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("runs/<int:pk>/artifacts/", views.RunArtifactsView.as_view(), name="run-artifacts"),
    path("runs/<int:pk>/artifacts/<path:name>", views.RunArtifactFileView.as_view(), name="run-artifact-file"),
]
