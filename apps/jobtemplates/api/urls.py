from rest_framework.routers import SimpleRouter

from apps.jobtemplates.api.views import ApprovedImageViewSet, JobTemplateViewSet

router = SimpleRouter()
router.register("templates", JobTemplateViewSet, basename="api-template")
router.register("images", ApprovedImageViewSet, basename="api-image")
urlpatterns = router.urls
