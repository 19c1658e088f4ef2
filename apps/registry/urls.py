from django.urls import URLPattern, URLResolver, path

from apps.registry import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:project_id>/models/", views.models_page, name="project-models"),
    path("projects/<int:project_id>/models/new/", views.model_create_page, name="model-create"),
    path("models/<int:model_id>/", views.model_page, name="model"),
    path("models/<int:model_id>/rollback/", views.model_rollback_page, name="model-rollback"),
    path("models/<int:model_id>/versions/<int:number>/promote/", views.version_promote_page, name="model-version-promote"),
    path("models/<int:model_id>/versions/<int:number>/stage/", views.version_stage_page, name="model-version-stage"),
    path("runs/<int:run_id>/register-model-version/", views.version_register_page, name="run-register-model-version"),
]
