from django.urls import URLPattern, URLResolver, path

from apps.runs import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("runs/new/", views.run_new_page, name="run-new"),
]
