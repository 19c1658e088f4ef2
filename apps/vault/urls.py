from django.urls import URLPattern, URLResolver, path

from apps.vault import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:project_id>/secrets/", views.secrets_page, name="project-secrets-page"),
    path("projects/<int:project_id>/secrets/set/", views.secret_set_page, name="project-secret-set"),
    path("projects/<int:project_id>/secrets/<str:name>/delete/", views.secret_delete_page, name="project-secret-delete"),
]
