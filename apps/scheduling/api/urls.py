from django.urls import URLPattern, URLResolver, path

from apps.scheduling.api.views import ForecastView, QueueView

urlpatterns: list[URLPattern | URLResolver] = [
    path("queue/", QueueView.as_view(), name="api-queue"),
    path("queue/forecast/", ForecastView.as_view(), name="api-queue-forecast"),
]
