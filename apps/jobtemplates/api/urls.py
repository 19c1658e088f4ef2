from rest_framework.routers import SimpleRouter

from apps.jobtemplates.api.views import JobTemplateViewSet

router = SimpleRouter()
router.register("templates", JobTemplateViewSet, basename="api-template")
urlpatterns = router.urls
