from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_submit, name="submit"),
    path("<slug:name>/", views.job_detail, name="detail"),
    path("<slug:name>/logs/<slug:replica>/", views.replica_log, name="log"),
    path("<slug:name>/metrics/", views.job_metrics, name="metrics"),
    path("<slug:name>/kill/", views.job_kill, name="kill"),
    path("<slug:name>/delete/", views.job_delete, name="delete"),
]
