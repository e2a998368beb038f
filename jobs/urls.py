from django.urls import path

from . import converters, views  # noqa: F401 (converters registers <jobname:>)

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_submit, name="submit"),
    path("-/bulk/", views.job_bulk, name="bulk"),  # "-": no job name starts so
    path("<jobname:name>/", views.job_detail, name="detail"),
    path("<jobname:name>/logs/all/", views.merged_log, name="log_merged"),
    path("<jobname:name>/logs/<slug:replica>/", views.replica_log, name="log"),
    path("<jobname:name>/logs/<slug:replica>/search/", views.log_search, name="log_search"),
    path("<jobname:name>/logs/<slug:replica>/download/", views.replica_log_download, name="log_download"),
    path("<jobname:name>/metrics/", views.job_metrics, name="metrics"),
    path("<jobname:name>/usage/", views.job_usage, name="usage"),
    path("<jobname:name>/compare/", views.job_compare, name="compare"),
    path("<jobname:name>/kill/", views.job_kill, name="kill"),
    path("<jobname:name>/clone/", views.job_clone, name="clone"),
    path("<jobname:name>/suspend/", views.job_suspend, name="suspend"),
    path("<jobname:name>/resume/", views.job_resume, name="resume"),
    path("<jobname:name>/delete/", views.job_delete, name="delete"),
]
