"""Included by paddleweb/api_urls.py under /api/v2/."""

from rest_framework.routers import SimpleRouter

from .views import JobViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns = router.urls
