"""Included by paddleweb/api_urls.py under /api/v2/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import DatacenterViewSet, RegistryViewSet, TokenViewSet, obtain_token, version

router = SimpleRouter()
router.register("registries", RegistryViewSet, basename="registry")
router.register("datacenters", DatacenterViewSet, basename="datacenter")
router.register("auth/tokens", TokenViewSet, basename="api-token")

urlpatterns = [
    *router.urls,
    path("auth/token/", obtain_token, name="token"),
    path("version/", version, name="version"),
]
