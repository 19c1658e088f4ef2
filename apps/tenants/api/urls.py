from rest_framework.routers import SimpleRouter

from apps.tenants.api.views import ProjectViewSet, TeamViewSet

router = SimpleRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("projects", ProjectViewSet, basename="project")
urlpatterns = router.urls
