from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from apps.registry.api.views import ModelVersionCostView, RegisteredModelViewSet

router = SimpleRouter()
router.register("models", RegisteredModelViewSet, basename="registered-model")

urlpatterns: list[URLPattern | URLResolver] = [
    path("model-costs/", ModelVersionCostView.as_view(), name="model-costs"),
    *router.urls,
]
