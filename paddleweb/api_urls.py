"""/api/v2: the native REST API used by paddlectl, the SDK and scripts."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from accounts.api.views import DatacenterViewSet, RegistryViewSet, TokenViewSet, obtain_token, version
from jobs.api.views import JobViewSet
from notifications.api.views import WebhookViewSet
from quotas.api.views import quota

from .api import not_found
from .health_api import HealthView

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("registries", RegistryViewSet, basename="registry")
router.register("datacenters", DatacenterViewSet, basename="datacenter")
router.register("auth/tokens", TokenViewSet, basename="api-token")
router.register("webhooks", WebhookViewSet, basename="webhook")

urlpatterns = [
    path("", include(router.urls)),
    path("auth/token/", obtain_token, name="token"),
    path("quota/", quota, name="quota"),
    path("", include("pfs.api.urls")),
    path("version/", version, name="version"),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    # Last: any other URL ending in "/" (one without still gets the slash appended first).
    re_path(r"^[\s\S]*/$", not_found),  # [\s\S], not ".": names may hold a newline too
]
