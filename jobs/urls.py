from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_submit, name="submit"),
    path("<str:name>/", views.job_detail, name="detail"),
    path("<str:name>/logs/<str:replica>/", views.replica_log, name="log"),
    path("<str:name>/metrics/", views.job_metrics, name="metrics"),
    path("<str:name>/kill/", views.job_kill, name="kill"),
    path("<str:name>/delete/", views.job_delete, name="delete"),
]
