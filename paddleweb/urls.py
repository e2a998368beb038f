from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from accounts import views as account_views
from jobs import views as jobs_views
from paddleweb import prometheus
from pfs import views as pfs_views

admin.site.site_header = admin.site.site_title = "PaddleCloud administration"
admin.site.index_title = "PaddleCloud"

urlpatterns = [
    # Browsers ask for /favicon.ico whatever the page links to.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
    path("", RedirectView.as_view(pattern_name="jobs:list"), name="home"),
    path("login/", account_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("account/webhooks/", include("notifications.urls")),
    path("account/", include("accounts.urls")),
    path("api/v2/", include(("paddleweb.api_urls", "api"))),
    path("", include("legacy.urls")),  # /api/v1/ and /api-token-auth/ (protocol-v1.md)
    path("jobs/", include("jobs.urls")),
    path("runs/", include("jobs.runs_views")),
    path("cluster/", jobs_views.cluster_page, name="cluster"),
    path("cluster/jobs/<int:pk>/kill/", jobs_views.cluster_kill, name="cluster_kill"),
    path("files/", include("pfs.urls")),
    path("metrics", prometheus.metrics_view, name="metrics"),
    path("filepub/", pfs_views.filepub, name="filepub"),
]
