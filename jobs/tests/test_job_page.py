"""The job page as ML engineers read it: times, progress and ETA, the default log tab, the full
log download, a pserver we stopped after success shown as normal, and the admin's record views."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import job_page, services
from jobs.live import logstore
from jobs.models import Job, JobEvent
from tests.support import make_package

pytestmark = pytest.mark.django_db

STOP_TRACE = (
    "--------------------------------------\n"
    "C++ Traceback (most recent call last):\n"
    "--------------------------------------\n"
    "0   paddle::distributed::BrpcPsServer::Start\n"
    "----------------------\n"
    "Error Message Summary:\n"
    "----------------------\n"
    "FatalError: `Termination signal` is detected by the operating system.\n"
    "  [SignalInfo: *** SIGTERM (@0x3e8) received by PID 42 (TID 0x7f) from PID 7 ***]\n"
)


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1,
                                       "trainers": 2, "passes": 10})


@pytest.fixture
def frozen_now(monkeypatch):
    """The clock stands still: a page rendered a moment after the test set its times shows them exactly."""
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    return now


def set_times(job, *, queued, ran=None, state="Running"):
    """A job that waited `queued` (one second of it building) and then ran for `ran`, as its
    job-level events record it."""
    build = timedelta(seconds=1) if ran is not None else timedelta(0)
    phases = [("Queued", queued - build)] + ([("Building", build), ("Running", ran)] if ran is not None else [])
    ended = state in ("Succeeded", "Failed", "Killed")
    timeline(job, *phases, *([(state, timedelta(0))] if ended else []))


def timeline(job, *phases):
    """Replace the job's events with `phases` ((state, how long), oldest first) ending now."""
    now = timezone.now()
    at = now - sum((d for _, d in phases), timedelta(0))
    JobEvent.objects.filter(job=job).delete()
    started = None
    for state, spent in phases:
        JobEvent.objects.filter(pk=JobEvent.objects.create(job=job, state=state, reason=state).pk).update(created=at)
        started = at if state == "Running" else started
        at += spent
    last = phases[-1][0]
    Job.objects.filter(pk=job.pk).update(created=now - sum((d for _, d in phases), timedelta(0)), state=last,
                                         started=started,
                                         finished=now if last in ("Succeeded", "Failed", "Killed") else None)
    job.refresh_from_db()


def metric_lines(replica, passes):
    lines = (b'PADDLECLOUD_METRIC {"step": %d, "loss": 1.5}\n' % p for p in range(1, passes + 1))
    logstore.append(replica, b"".join(lines))


def text(html):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_running_job_shows_queue_time_elapsed_time_progress_and_eta(web, job, frozen_now):
    set_times(job, queued=timedelta(seconds=65), ran=timedelta(minutes=4))
    metric_lines(job.replicas.get(role="trainer", index=0), 5)
    metric_lines(job.replicas.get(role="trainer", index=1), 4)  # the slowest trainer sets the pace
    page = text(web.get("/jobs/fit/?part=status", headers={"HX-Request": "true"}).content.decode())
    assert "Queued 1m 04s" in page and "Build 1s" in page  # the wait and the build apart
    assert "Elapsed 4m 00s" in page
    assert "pass 4 of 10 · ETA 6m 00s" in page  # 1 minute a pass so far, 6 passes to go


def test_a_finished_job_shows_its_duration_and_no_eta(web, job, frozen_now):
    set_times(job, queued=timedelta(seconds=3), ran=timedelta(hours=1, seconds=2), state="Succeeded")
    for replica in job.replicas.filter(role="trainer"):
        metric_lines(replica, 10)
    page = text(web.get("/jobs/fit/").content.decode())
    assert "Duration 1h 00m 02s" in page and "Elapsed" not in page
    assert "pass 10 of 10" in page and "ETA" not in page


def test_the_queue_wait_and_the_build_time_are_shown_apart(web, job, frozen_now):
    timeline(job, ("Queued", timedelta(seconds=0.5)), ("Building", timedelta(seconds=115)),
             ("Running", timedelta(seconds=30)))
    page = text(web.get("/jobs/fit/").content.decode())
    assert "Queued 0s Build 1m 55s Elapsed 30s" in page


def test_suspended_and_restarted_attempts_add_up_and_the_eta_counts_them_all(web, job, frozen_now):
    """Ran 60 s, suspended an hour, resumed: 30 s more. 6 passes in 90 s of running: 15 s a pass."""
    timeline(job, ("Queued", timedelta(seconds=1)), ("Building", timedelta(seconds=1)),
             ("Starting", timedelta(seconds=0)), ("Running", timedelta(seconds=60)),
             ("Suspended", timedelta(hours=1)), ("Queued", timedelta(seconds=2)), ("Building", timedelta(seconds=1)),
             ("Running", timedelta(seconds=30)))
    for replica in job.replicas.filter(role="trainer"):
        metric_lines(replica, 6)
    page = text(web.get("/jobs/fit/").content.decode())
    assert "Queued 3s Build 2s Elapsed 1m 30s" in page
    assert "pass 6 of 10 · ETA 1m 00s" in page  # 4 passes to go at 15 s each
    timeline(job, ("Queued", timedelta(seconds=1)), ("Running", timedelta(seconds=60)),
             ("Suspended", timedelta(hours=1)), ("Running", timedelta(seconds=30)), ("Succeeded", timedelta(0)))
    assert "Duration 1m 30s" in text(web.get("/jobs/fit/").content.decode())


def test_a_job_that_resumed_an_earlier_jobs_checkpoint_says_so_and_paces_its_own_passes(web, job, frozen_now):
    timeline(job, ("Queued", timedelta(seconds=1)), ("Running", timedelta(seconds=20)))
    for replica in job.replicas.filter(role="trainer"):
        logstore.append(replica, b"trainer resumes after pass 8\n")
        logstore.append(replica, b'PADDLECLOUD_METRIC {"step": 9, "loss": 1.5}\n')
    page = text(web.get("/jobs/fit/").content.decode())
    assert "pass 9 of 10 · ETA 20s · resumed from checkpoint (pass 8)" in page  # 20 s for its one pass


def test_a_queued_job_counts_its_waiting_time_and_shows_no_progress(web, job, frozen_now):
    set_times(job, queued=timedelta(seconds=7), state="Queued")
    page = text(web.get("/jobs/fit/").content.decode())
    assert "Queued 7s" in page and "Elapsed" not in page and "pass " not in page


def test_metric_lines_that_do_not_count_passes_give_no_progress(job):
    trainers = list(job.replicas.filter(role="trainer"))
    now = timezone.now()
    assert job_page.progress(job, trainers, now) is None  # no line yet
    metric_lines(trainers[0], 500)  # one line per batch, not per pass
    assert job_page.progress(job, trainers, now) is None


def test_a_pass_key_counts_passes_and_a_trainer_without_lines_counts_none(job):
    trainer_0, trainer_1 = job.replicas.filter(role="trainer")
    logstore.append(trainer_0, b'PADDLECLOUD_METRIC {"step": 700, "pass": 3, "loss": 0.1}\nmore output\n')
    assert job_page.progress(job, [trainer_0], timezone.now()).done == 3
    assert job_page.progress(job, [trainer_0, trainer_1], timezone.now()).done == 0


def test_state_and_reason_are_not_repeated(web, job):
    Job.objects.filter(pk=job.pk).update(state="Running", reason="Running")
    page = web.get("/jobs/fit/").content.decode()
    assert "<strong>Running</strong>" not in page
    Job.objects.filter(pk=job.pk).update(state="Failed", reason="TrainerFailed")
    assert "<strong>TrainerFailed</strong>" in web.get("/jobs/fit/").content.decode()


def test_the_first_log_tab_is_trainer_0_not_pserver_0(web, job):
    assert 'hx-get="/jobs/fit/logs/build/" hx-trigger="load"' in web.get("/jobs/fit/").content.decode()  # queued
    Job.objects.filter(pk=job.pk).update(state="Running")
    page = web.get("/jobs/fit/").content.decode()
    assert re.search(r'<a [^>]*class="current"[^>]*>trainer-0</a>', page)
    assert 'hx-get="/jobs/fit/logs/trainer-0/" hx-trigger="load"' in page
    assert 'id="log-download" href="/jobs/fit/logs/trainer-0/download/"' in page


def test_the_full_log_downloads_whole_beyond_the_page_tail(web, job):
    replica = job.replicas.get(role="trainer", index=0)
    body = b"".join(b"line %d\n" % i for i in range(5000))
    logstore.append(replica, body)
    assert "line 0\n" not in web.get("/jobs/fit/logs/trainer-0/").content.decode()  # the page shows the tail
    res = web.get("/jobs/fit/logs/trainer-0/download/")
    assert res.status_code == 200 and res.streaming
    assert b"".join(res.streaming_content) == body
    assert res["Content-Length"] == str(len(body))
    assert res["Content-Type"] == "text/plain; charset=utf-8"
    assert res["Content-Disposition"] == 'attachment; filename="fit-trainer-0.log"'


def test_a_log_not_written_yet_downloads_empty(web, job):
    res = web.get("/jobs/fit/logs/pserver-0/download/")
    assert res.status_code == 200 and res.content == b""


def test_log_downloads_are_only_for_the_owner_and_real_replicas(client, web, job, bob):
    assert web.get("/jobs/fit/logs/trainer-9/download/").status_code == 404
    client.force_login(bob)
    assert client.get("/jobs/fit/logs/trainer-0/download/").status_code == 404


def test_a_pserver_stopped_after_success_is_shown_as_normal_with_its_trace_folded(web, job):
    Job.objects.filter(pk=job.pk).update(state="Succeeded")
    job.replicas.filter(role="trainer").update(state="Succeeded", exit_code=0)
    pserver = job.replicas.get(role="pserver")
    job.replicas.filter(pk=pserver.pk).update(state="Terminated", reason="Terminated", message="stopped by PaddleCloud")
    logstore.append(pserver, b"pserver listening\n" + STOP_TRACE.encode())
    status = web.get("/jobs/fit/").content.decode()
    # The state's word as in the events, the API and the CLI, shown as the normal end it is.
    assert '<span class="state stopped" title="stopped by PaddleCloud after the trainers succeeded: the normal end">' \
           'Terminated</span>' in status
    log = web.get("/jobs/fit/logs/pserver-0/").content.decode()
    shown, folded = log.split('<details class="stop-trace">')
    assert "pserver listening" in shown and "FatalError" not in shown and "C++ Traceback" not in shown
    assert "C++ Traceback" in folded and "Termination signal" in folded
    assert "pserver-0 · Terminated ·" in shown


def test_a_pserver_terminated_when_the_job_failed_keeps_its_state_and_trace(web, job):
    Job.objects.filter(pk=job.pk).update(state="Failed")
    pserver = job.replicas.get(role="pserver")
    job.replicas.filter(pk=pserver.pk).update(state="Terminated", reason="Terminated")
    logstore.append(pserver, STOP_TRACE.encode())
    assert '<span class="state terminated">Terminated</span>' in web.get("/jobs/fit/").content.decode()
    log = web.get("/jobs/fit/logs/pserver-0/").content.decode()
    assert "stop-trace" not in log and "Termination signal" in log


def test_split_stop_trace_leaves_logs_without_one_alone():
    assert job_page.split_stop_trace("just a log\n") == ("just a log\n", "")
    assert job_page.split_stop_trace("x\nFatalError: `Termination signal` is detected\n") == (
        "x\n", "FatalError: `Termination signal` is detected\n")


def test_split_stop_trace_folds_a_summary_without_a_traceback():
    summary = STOP_TRACE[STOP_TRACE.index("----------------------\nError Message Summary"):]
    assert job_page.split_stop_trace("serving\n" + summary) == ("serving\n", summary)


def test_split_stop_trace_keeps_an_earlier_errors_traceback_in_view():
    earlier = STOP_TRACE.replace("FatalError: `Termination signal` is detected", "InvalidArgument: bad shape")
    summary = STOP_TRACE[STOP_TRACE.index("----------------------\nError Message Summary"):]
    assert job_page.split_stop_trace(earlier + "recovered\n" + summary) == (earlier + "recovered\n", summary)


def test_the_favicon_is_linked_and_served(web):
    assert 'rel="icon" href="/static/img/favicon.svg"' in web.get("/jobs/").content.decode()
    res = web.get("/favicon.ico")
    assert res.status_code == 301 and res.url == "/static/img/favicon.svg"


def submit_named(user, name):
    pkg = make_package(user, name, {"train.py": ""})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "pservers": 1})


def test_the_old_compare_link_opens_the_runs_overlay(web, job):
    res = web.get("/jobs/fit/compare/", {"with": ["fit.v2", "x"]})
    assert res.status_code == 302 and res["Location"] == "/runs/compare/?job=fit&job=fit.v2&job=x"
