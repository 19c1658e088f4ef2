from django.urls import URLPattern, URLResolver, path

from apps.webhooks import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:pk>/webhooks/", views.delivery_log_page, name="project-webhooks"),
]
