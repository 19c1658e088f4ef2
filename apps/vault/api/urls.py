from django.urls import URLPattern, URLResolver, path

from apps.vault.api import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:project_id>/secrets/", views.ProjectSecretListView.as_view(), name="project-secrets"),
    path("projects/<int:project_id>/secrets/<str:name>/", views.ProjectSecretDetailView.as_view(), name="project-secret"),
]
