from django.urls import URLPattern, URLResolver, path

from apps.scheduling.views import queue_page

urlpatterns: list[URLPattern | URLResolver] = [path("queue/", queue_page, name="queue")]
