"""Included by paddleweb/api_urls.py under /api/v2/."""

from django.urls import path

from . import upload_views, views

urlpatterns = [
    path("files/", views.FilesView.as_view(), name="pfs-files"),
    path("files/stat/", views.StatView.as_view(), name="pfs-stat"),
    path("files/mkdir/", views.MkdirView.as_view(), name="pfs-mkdir"),
    path("files/move/", views.MoveView.as_view(), name="pfs-move"),
    path("files/copy/", views.CopyView.as_view(), name="pfs-copy"),
    path("files/content/", views.ContentView.as_view(), name="pfs-content"),
    path("storage/usage/", views.UsageView.as_view(), name="pfs-usage"),
    path("uploads/", upload_views.UploadListView.as_view(), name="pfs-uploads"),
    path("uploads/<str:upload_id>/", upload_views.UploadDetailView.as_view(), name="pfs-upload"),
    path("shares/", upload_views.ShareListView.as_view(), name="pfs-shares"),
    path("shares/<str:share_uuid>/", upload_views.ShareDetailView.as_view(), name="pfs-share"),
]
