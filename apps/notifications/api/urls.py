from django.urls import URLPattern, URLResolver
from rest_framework.routers import SimpleRouter

from apps.notifications.api.views import NotificationViewSet

router = SimpleRouter()
router.register("notifications", NotificationViewSet, basename="notification")

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
