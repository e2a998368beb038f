from django.urls import path

from . import views

app_name = "pfs"
urlpatterns = [
    path("", views.files_home, name="home"),
    path("-/listing/", views.listing, name="listing"),
    path("-/mkdir/", views.make_dir, name="mkdir"),
    path("-/rename/", views.rename, name="rename"),
    path("-/delete/", views.delete, name="delete"),
    path("-/share/", views.share, name="share"),
    path("-/unshare/", views.unshare, name="unshare"),
    path("<path:vpath>", views.browse, name="browse"),
]
