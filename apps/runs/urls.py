from django.urls import URLPattern, URLResolver, path

from apps.runs import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("runs/new/", views.run_new_page, name="run-new"),
    path("runs/<int:pk>/rerun/", views.run_rerun_page, name="run-rerun"),
    path("runs/<int:pk>/annotate/", views.run_annotate_page, name="run-annotate"),
]
