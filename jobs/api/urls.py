"""Included by paddleweb/api_urls.py under /api/v2/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from .cluster import cluster_view
from .quota import quota
from .views import JobViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns = [*router.urls, path("quota/", quota, name="quota"), path("cluster/", cluster_view, name="cluster")]
