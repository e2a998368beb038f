"""/api/v2: the native REST API used by paddlectl, the SDK and scripts."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from accounts.api import urls as accounts_api
from core.api import not_found
from core.health_api import HealthView
from jobs.api import urls as jobs_api
from notifications.api import urls as notifications_api

# Each app routes its own API (<app>/api/urls.py); this router only serves the index of them all.
index = DefaultRouter()
for app in (jobs_api, accounts_api, notifications_api):
    index.registry.extend(app.router.registry)

urlpatterns = [
    path("", index.get_api_root_view(), name="api-root"),
    path("", include("jobs.api.urls")),
    path("", include("accounts.api.urls")),
    path("", include("notifications.api.urls")),
    path("", include("pfs.api.urls")),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    # Last: any other URL ending in "/" (one without still gets the slash appended first).
    re_path(r"^[\s\S]*/$", not_found),  # [\s\S], not ".": names may hold a newline too
]
