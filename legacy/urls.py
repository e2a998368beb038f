"""The legacy protocol's routes, each with or without its trailing slash: the old client sends
some without one (`/api/v1/logs?...`), and a redirect would lose a POST's body."""

from django.urls import re_path

from . import views

urlpatterns = [
    re_path(r"^api-token-auth/?$", views.token_auth, name="legacy-token"),
    re_path(r"^api/v1/jobs/?$", views.jobs_view, name="legacy-jobs"),
    re_path(r"^api/v1/pservers/?$", views.pservers, name="legacy-pservers"),
    re_path(r"^api/v1/workers/?$", views.workers, name="legacy-workers"),
    re_path(r"^api/v1/quota/?$", views.quota, name="legacy-quota"),
    re_path(r"^api/v1/logs/?$", views.logs, name="legacy-logs"),
    re_path(r"^api/v1/registry/?$", views.registry, name="legacy-registry"),
    re_path(r"^api/v1/file/?$", views.file, name="legacy-file"),
    re_path(r"^api/v1/filelist/?$", views.filelist, name="legacy-filelist"),
    re_path(r"^api/v1/publish/?$", views.publish, name="legacy-publish"),
    re_path(r"^api/v1/pfs/files/?$", views.pfs_files, name="legacy-pfs-files"),
    re_path(r"^api/v1/pfs/chunks/?$", views.pfs_chunks, name="legacy-pfs-chunks"),
    re_path(r"^api/v1/pfs/storage/chunks/?$", views.pfs_storage_chunks, name="legacy-pfs-storage-chunks"),
    re_path(r"^api/v1/", views.not_found),
]
