from django.urls import URLPattern, URLResolver
from rest_framework.routers import SimpleRouter

from apps.webhooks.api.views import WebhookDeliveryViewSet, WebhookEndpointViewSet

router = SimpleRouter()
router.register("webhooks", WebhookEndpointViewSet, basename="webhook")
router.register("webhook-deliveries", WebhookDeliveryViewSet, basename="webhook-delivery")

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
