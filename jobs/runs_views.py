"""The runs pages: the runs table (/runs/) and up to runs.MAX_OVERLAID runs on one chart
(/runs/compare/?job=a&job=b)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import path, reverse

from accounts.current import AuthenticatedHttpRequest

from . import runs, services
from .filtersets import JobFilterSet


@login_required
def runs_table(request: AuthenticatedHttpRequest) -> HttpResponse:
    filters = JobFilterSet(request.GET, queryset=services.visible_jobs(request.user))
    rows, metrics = runs.table(filters.qs.prefetch_related("replicas"))
    key = request.GET.get("order", "")
    return render(request, "jobs/runs.html", {
        "rows": runs.sort(rows, key), "metrics": metrics, "order": key, "filters": filters,
        "max_overlaid": runs.MAX_OVERLAID, "max_rows": runs.MAX_ROWS})


@login_required
def runs_compare(request: AuthenticatedHttpRequest) -> HttpResponse:
    jobs, error = runs.overlaid(request.user, request.GET.getlist("job"))
    series = [[j.name, reverse("jobs:metrics", args=[j.name])] for j in jobs]
    return render(request, "jobs/runs_compare.html", {"jobs": jobs, "series": series, "error": error,
                                                      "max_overlaid": runs.MAX_OVERLAID},
                  status=400 if error else 200)


app_name = "runs"
urlpatterns = [
    path("", runs_table, name="table"),
    path("compare/", runs_compare, name="compare"),
]
