from django.urls import URLPattern, URLResolver, path

from apps.scheduling.api.views import QueueView

urlpatterns: list[URLPattern | URLResolver] = [path("queue/", QueueView.as_view(), name="api-queue")]
