from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from pfs import views as pfs_views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="jobs:list"), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("account/webhooks/", include("notifications.urls")),
    path("account/", include("accounts.urls")),
    path("api/v2/", include(("paddleweb.api_urls", "api"))),
    path("", include("legacy.urls")),  # /api/v1/ and /api-token-auth/ (protocol-v1.md)
    path("jobs/", include("jobs.urls")),
    path("files/", include("pfs.urls")),
    path("filepub/", pfs_views.filepub, name="filepub"),
]
