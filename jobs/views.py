from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required, user_passes_test
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from accounts.current import AuthenticatedHttpRequest
from accounts.models import Datacenter
from core.pagination import cursor_page

from . import checkpoints, cluster, job_page, logs, services
from .filtersets import JobFilterSet
from .forms import JobForm, LogLinesForm
from .lifecycle import retention
from .live import usage
from .live.metrics import parse_metrics
from .models import ACTIVE_STATES, ADMITTED_STATES, Job, JobState, Replica, ReplicaState

if TYPE_CHECKING:
    from .live.logstore import LogSource


# A listed job's datacenter and owner are shown by name alone: their other columns were decoded
# and built into models for every row.
_LISTED_NAMES_ONLY = [
    *(f"datacenter__{f.name}" for f in Datacenter._meta.concrete_fields if f.name not in ("id", "name")),
    *(f"user__{f.name}" for f in get_user_model()._meta.concrete_fields
      if f.name not in ("id", get_user_model().USERNAME_FIELD))]


@login_required
def job_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    # The API's FilterSet: the page's filters are the API's, with the same names and values.
    everyone = request.user.is_staff and request.GET.get("owner") == "all"
    jobs = services.visible_jobs(request.user) if not everyone else Job.objects.filter(deleting=False)
    filters = JobFilterSet(request.GET, queryset=jobs.select_related("datacenter", "user").defer(*_LISTED_NAMES_ONLY))
    page = cursor_page(filters.qs, request, page_size=25)
    rows = job_page.list_rows(page.items, timezone.now(), request.user.pk)
    # Whether an empty page means no jobs at all, or none that match (the order is no filter).
    filtered = any(v for k, v in request.GET.items() if k in filters.filters and k != "sort")
    context = {"page": page, "rows": rows, "filtered": filtered, "everyone": everyone}
    if request.htmx:  # the rows' refresh every 3 s: no filter form to fill
        return render(request, "jobs/_job_rows.html", context)
    datacenters = Datacenter.objects.order_by("name").values_list("name", flat=True)
    return render(request, "jobs/job_list.html", {**context, "filters": filters, "states": JobState.values,
                                                  "datacenters": list(datacenters)})


@login_required
@require_POST
def job_bulk(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Kill or delete the jobs ticked in the list: one's own, or any job for staff."""
    action = request.POST.get("action")
    ids = [int(i) for i in request.POST.getlist("job") if i.isdigit()][:100]
    jobs = Job.objects.filter(deleting=False) if request.user.is_staff else services.visible_jobs(request.user)
    chosen = list(jobs.filter(pk__in=ids).select_related("datacenter", "user").order_by("name"))
    if action not in ("kill", "delete") or not chosen:
        messages.error(request, "Tick the jobs to kill or delete first.")
        return redirect(request.POST.get("next") or "jobs:list")

    def by(job: Job) -> str:  # who killed it, when not its owner
        return request.user.get_username() if job.user_id != request.user.pk else ""

    if action == "kill":
        killed = [job.name for job in chosen if services.kill_job(job, by=by(job))]
        messages.success(request, f"Killing {', '.join(killed)}." if killed else "Those jobs had already ended.")
    else:
        for job in chosen:
            services.delete_job(job)
        messages.success(request, f"Deleted {', '.join(j.name for j in chosen)} with their history and logs "
                                  "(checkpoints stay).")
    return redirect(request.POST.get("next") or "jobs:list")


@login_required
def job_submit(request: AuthenticatedHttpRequest) -> HttpResponse:
    # ?from=<job>: "Edit and resubmit", the form prefilled with that job's spec and package.
    source = None
    if request.GET.get("from"):
        source = get_object_or_404(services.visible_jobs(request.user), name=request.GET["from"])
    initial = JobForm.initial_from(source, services.free_name(request.user, source.name)) if source else None
    form = JobForm(request.POST or None, request.FILES or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if k not in ("files", "source")}
        try:
            if form.cleaned_data["source"] == "upload":
                job = services.submit_with_upload(request.user, data, form.cleaned_data["files"], cloned_from=source)
            elif source is not None:
                job = services.clone_job(request.user, source, data)
            else:
                job = services.submit_job(request.user, data)
        except ValidationError as e:
            # Fields the form lacks (e.g. "storage") go above the form instead of failing.
            for field, errors in (e.message_dict if hasattr(e, "error_dict") else {None: e.messages}).items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"Job {job.name} submitted.")
            return redirect("jobs:detail", name=job.name)
    return render(request, "jobs/job_submit.html", {"form": form, "source": source})


@login_required
def job_detail(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    job = get_object_or_404(services.visible_jobs(request.user).select_related("cloned_from"), name=name)
    replicas = list(usage.with_latest(job.replicas.all()))
    for r in replicas:
        r.stopped_after_success = job_page.stopped_after_success(job, r)  # type: ignore[attr-defined]  # for the page
    # Keep refreshing until every replica has settled: pservers stop just after a job succeeds.
    live = job.is_active or any(r.state in (ReplicaState.PENDING, ReplicaState.RUNNING) for r in replicas)
    now = timezone.now()
    timing = job_page.timing(job, now, job_page.state_times(job))
    events = list(job.events.select_related("replica"))
    context = {"job": job, "replicas": replicas, "events": events, "live": live,
               "checkpoints_found": next((e.message for e in events if e.reason == checkpoints.FOUND), ""),
               "waiting": services.waiting_reason(job), "timing": timing,
               "progress": job_page.progress(job, [r for r in replicas if r.role == "trainer"], now, timing.elapsed),
               "log_names": [logs.BUILD, *(r.name for r in replicas)],
               "log_replica": job_page.default_log(job, replicas),
               "can_suspend": job.state in (JobState.QUEUED, *ADMITTED_STATES), "purged_notice": retention.notice(job)}
    if request.htmx and request.GET.get("part") == "status":
        return render(request, "jobs/_job_status.html", context)
    context["checkpoints_dir"] = checkpoints.where(job) if checkpoints.found(job) else ""
    return render(request, "jobs/job_detail.html", context)


def _log_source(request: AuthenticatedHttpRequest, name: str, replica: str) -> tuple[Job, LogSource | None]:
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    return job, logs.find(job, replica)


@login_required
def replica_log(request: AuthenticatedHttpRequest, name: str, replica: str) -> HttpResponse:
    """A log panel: the last lines of a replica's log, or of the job's build log (`build`)."""
    job, source = _log_source(request, name, replica)
    if source is None:
        return render(request, "jobs/_log.html", {"error": f"no replica {replica}"}, status=404)
    query = LogLinesForm(request.GET)
    if not query.is_valid():
        return render(request, "jobs/_log.html", {"error": f"lines: {query.errors['lines'][0]}"}, status=400)
    chunk = logs.read(job, source, lines=query.cleaned_data["lines"] or 300)
    text, trace = chunk.text, ""
    if isinstance(source, Replica) and job_page.stopped_after_success(job, source):
        text, trace = job_page.split_stop_trace(chunk.text)
    return render(request, "jobs/_log.html", {"job": job, "source": source, "state": logs.state(job, source),
                                              "chunk": chunk, "text": text, "trace": trace})


@login_required
def merged_log(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """The "all" tab: the last lines of every log of the job in the order they were written."""
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    lines = logs.merged(job, 500)
    live = job.is_active or job.replicas.filter(state__in=[ReplicaState.PENDING, ReplicaState.RUNNING]).exists()
    return render(request, "jobs/_log_merged.html", {"job": job, "lines": lines, "live": live,
                                                     "notice": retention.notice(job)})


@login_required
def log_search(request: AuthenticatedHttpRequest, name: str, replica: str) -> HttpResponse:
    """Every line of the whole log (not only the panel's last lines) that holds ?q=, numbered."""
    job, source = _log_source(request, name, replica)
    if source is None:
        raise Http404(f"no replica {replica}")
    query = request.GET.get("q", "")[:200]
    matches, truncated = logs.search(source, query) if query else ([], False)
    return render(request, "jobs/_log_search.html", {"job": job, "source": source, "query": query,
                                                     "matches": matches, "truncated": truncated})


@login_required
def replica_log_download(request: AuthenticatedHttpRequest, name: str, replica: str) -> HttpResponseBase:
    """The whole log as a file (the page shows only its last lines)."""
    job, source = _log_source(request, name, replica)
    if source is None:
        raise Http404(f"no replica {replica}")
    return job_page.log_download(source, f"{job.name}-{source.name}.log")


@login_required
def job_metrics(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Metric lines printed by the trainers, as series for the job page's chart."""
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    return JsonResponse(parse_metrics(job))


@login_required
def job_usage(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Each replica's CPU and memory samples, as series for the job page's usage charts."""
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    return JsonResponse({"replicas": usage.chart_series(job)})


@login_required
def job_compare(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Old links (/jobs/<name>/compare/?with=...): the runs page's overlay of this job and those."""
    query = urlencode([("job", name), *(("job", w) for w in request.GET.getlist("with"))])
    return redirect(f"{reverse('runs:compare')}?{query}")


@login_required
@require_POST
def job_kill(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    if services.kill_job(job):
        messages.success(request, f"Job {job.name} is being killed.")
    else:
        messages.info(request, f"Job {job.name} had already ended.")
    return redirect("jobs:detail", name=job.name)


@login_required
@require_POST
def job_clone(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Run again: the same spec under a free name, submitted at once."""
    source = get_object_or_404(services.visible_jobs(request.user), name=name)
    try:
        job = services.clone_job(request.user, source, {})
    except ValidationError as e:
        messages.error(request, f"Job {source.name} could not run again: {_errors(e)}")
        return redirect("jobs:detail", name=source.name)
    messages.success(request, f"Job {job.name} submitted, a copy of {source.name}.")
    return redirect("jobs:detail", name=job.name)


@login_required
@require_POST
def job_suspend(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    return _job_action(request, name, services.suspend_job, "is being suspended.")


@login_required
@require_POST
def job_resume(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    return _job_action(request, name, services.resume_job, "resumed: queued again.")


def _job_action(request: AuthenticatedHttpRequest, name: str, action: Callable[[Job], object],
                done: str) -> HttpResponse:
    """Run a service action on one of the user's jobs; its refusal becomes a message on the page."""
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    try:
        action(job)
    except ValidationError as e:
        messages.error(request, _errors(e))
    else:
        messages.success(request, f"Job {job.name} {done}")
    return redirect("jobs:detail", name=job.name)


def _errors(e: ValidationError) -> str:
    if hasattr(e, "error_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" if k != "state" else " ".join(v) for k, v in e.message_dict.items())
    return " ".join(e.messages)


@login_required
@require_POST
def job_delete(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    job = get_object_or_404(services.visible_jobs(request.user), name=name)
    with_checkpoints = request.POST.get("checkpoints") == "1"
    services.delete_job(job, checkpoints=with_checkpoints)
    what = "history, logs and checkpoints" if with_checkpoints else "history and logs"
    kept = "" if with_checkpoints else " Its checkpoints stay, for a job of that name to resume from."
    messages.success(request, f"Job {job.name} deleted with its {what}.{kept}")
    return redirect("jobs:list")


@login_required
def cluster_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every datacenter's capacity and use, its running jobs and its queue (others' jobs: owner and
    resources only); refreshed in place every few seconds."""
    context = {"datacenters": cluster.overview(request.user)}
    if request.htmx:
        return render(request, "jobs/_cluster.html", context)
    return render(request, "jobs/cluster.html", context)


@user_passes_test(lambda u: u.is_active and u.is_staff)
@require_POST
def cluster_kill(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """Staff stop any user's job from the cluster page (the owner sees who: the event says staff)."""
    job = get_object_or_404(Job.objects.filter(deleting=False, state__in=ACTIVE_STATES), pk=pk)
    if services.kill_job(job, by=request.user.get_username()):
        messages.success(request, f"Job {job.name} of {job.user.get_username()} is being killed.")
    return redirect("cluster")
