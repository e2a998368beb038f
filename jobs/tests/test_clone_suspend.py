"""Run again / edit and resubmit (clone), suspend and resume: the services' rules, the API, the
pages and the legacy API. Real processes: test_suspend_resume_processes.py."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from jobs import services
from jobs.lifecycle import queue
from jobs.models import Job, JobState, ReplicaState
from tests.support import make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": "print('hi')\n"})


@pytest.fixture
def job(alice, pkg):
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1,
                                       "trainers": 2, "cpu": "500m", "env": {"LR": "0.1"}, "passes": 3,
                                       "priority": 5, "max_restarts": 2, "restart_mode": "gang"})


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


def finish(job, state=JobState.SUCCEEDED):
    Job.objects.filter(pk=job.pk).update(state=state, finished=timezone.now())
    job.replicas.update(state=ReplicaState.SUCCEEDED)
    job.refresh_from_db()


# --- clone -----------------------------------------------------------------------------------
def test_clone_copies_the_spec_under_a_free_name_and_records_its_source(alice, job):
    copy = services.clone_job(alice, job, {})
    assert copy.name == "fit-2" and copy.cloned_from == job and copy.state == JobState.QUEUED
    for field in ("package", "entry", "pservers", "trainers", "cpu", "env", "passes", "priority", "max_restarts",
                  "restart_mode", "datacenter"):
        assert getattr(copy, field) == getattr(job, field), field
    assert [r.name for r in copy.replicas.all()] == ["pserver-0", "trainer-0", "trainer-1"]
    # Numbered names count on: a copy of fit-2 is fit-3, and a second copy of fit skips the taken fit-2.
    assert services.clone_job(alice, copy, {}).name == "fit-3"
    assert services.clone_job(alice, job, {}).name == "fit-4"


def test_a_free_name_stays_within_the_name_limit(alice, pkg):
    long = services.submit_job(alice, {"name": "a" * 40, "package": pkg, "entry": "python train.py"})
    assert services.clone_job(alice, long, {}).name == "a" * 38 + "-2"


def test_clone_changes_are_validated_like_a_submission(alice, job):
    copy = services.clone_job(alice, job, {"name": "fit-big", "trainers": 4, "env": {"LR": "0.2"}})
    assert (copy.name, copy.trainers, copy.env, copy.pservers) == ("fit-big", 4, {"LR": "0.2"}, 1)
    with pytest.raises(ValidationError) as e:
        services.clone_job(alice, job, {"trainers": 0, "memory": "lots", "name": "fit", "bogus": 1})
    assert set(e.value.message_dict) == {"bogus"}
    with pytest.raises(ValidationError) as e:
        services.clone_job(alice, job, {"trainers": 0, "memory": "lots", "name": "fit"})
    assert set(e.value.message_dict) == {"trainers", "memory", "name"}
    assert Job.objects.count() == 2


def test_api_clone_answers_201_with_cloned_from_and_400_by_field(alice_api, job):
    res = alice_api.post("/api/v2/jobs/fit/clone/", {"trainers": 3}, format="json")
    assert res.status_code == 201, res.json()
    body = res.json()
    assert (body["name"], body["trainers"], body["cloned_from"]) == ("fit-2", 3, "fit")
    assert alice_api.get("/api/v2/jobs/fit/").json()["cloned_from"] is None
    assert alice_api.get("/api/v2/jobs/").json()["results"][0]["cloned_from"] == "fit"
    res = alice_api.post("/api/v2/jobs/fit/clone/", {"trainers": "many", "cpu": "x"}, format="json")
    assert res.status_code == 400 and set(res.json()) == {"trainers", "cpu"}
    res = alice_api.post("/api/v2/jobs/fit/clone/", ["not", "an", "object"], format="json")
    assert res.status_code == 400


def test_the_clone_action_is_in_the_schema(alice_api):
    schema = alice_api.get("/api/v2/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    for action in ("clone", "suspend", "resume"):
        assert f"/api/v2/jobs/{{name}}/{action}/" in paths
    body = paths["/api/v2/jobs/{name}/clone/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    ref = body["$ref"].rsplit("/", 1)[1]
    assert not schema["components"]["schemas"][ref].get("required")  # every change is optional


def test_other_users_get_404_for_every_action(bob_api, job):
    for action in ("clone", "suspend", "resume"):
        assert bob_api.post(f"/api/v2/jobs/fit/{action}/", {}, format="json").status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and Job.objects.count() == 1


def test_pages_of_other_users_jobs_are_404(client, bob, job):
    client.force_login(bob)
    for action in ("clone", "suspend", "resume"):
        assert client.post(f"/jobs/fit/{action}/").status_code == 404
    assert client.get("/jobs/new/?from=fit").status_code == 404
    assert Job.objects.count() == 1


def test_run_again_on_the_page_submits_at_once(web, job):
    res = web.post("/jobs/fit/clone/")
    assert res.status_code == 302 and res.url == "/jobs/fit-2/"
    page = web.get("/jobs/fit-2/").content.decode()
    assert 'Cloned from</dt><dd><a href="/jobs/fit/">fit</a>' in page


def test_edit_and_resubmit_prefills_the_form_from_the_job(web, job):
    page = web.get("/jobs/new/?from=fit")
    form = page.context["form"]
    assert form["name"].value() == "fit-2" and form["source"].value() == "pfs"
    assert form["package"].value() == job.package and form["env"].value() == "LR=0.1"
    assert form["trainers"].value() == 2 and form["cpu"].value() == "500m"
    data = {k: form[k].value() for k in form.fields if k != "files"}
    data.update({"trainers": 3, "registry": "", "max_restarts": 2, "timeout": ""})
    res = web.post("/jobs/new/?from=fit", data)
    assert res.status_code == 302, res.context["form"].errors
    copy = Job.objects.get(name="fit-2")
    assert copy.trainers == 3 and copy.cloned_from == job and copy.env == {"LR": "0.1"}


def test_edit_and_resubmit_with_a_new_upload_still_records_the_source(web, job):
    import io
    import zipfile

    from django.core.files.uploadedfile import SimpleUploadedFile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("train.py", "print('v2')\n")
    form = web.get("/jobs/new/?from=fit").context["form"]
    data = {k: form[k].value() for k in form.fields if k != "files"}
    data.update({"source": "upload", "package": "", "registry": "", "max_restarts": 2, "timeout": "",
                 "files": SimpleUploadedFile("pkg.zip", buf.getvalue(), "application/zip")})
    res = web.post("/jobs/new/?from=fit", data)
    assert res.status_code == 302, res.context["form"].errors
    copy = Job.objects.get(name="fit-2")
    assert copy.cloned_from == job and copy.package.endswith("/jobs/fit-2")


# --- suspend / resume ------------------------------------------------------------------------
def test_suspending_a_queued_job_takes_it_out_of_the_queue(job):
    services.suspend_job(job)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.SUSPENDED, "Suspended")
    assert {(r.state, r.reason) for r in job.replicas.all()} == {(ReplicaState.TERMINATED, "Suspended")}
    assert job.events.last().state == JobState.SUSPENDED


def test_resume_queues_again_with_every_replica_a_new_attempt(job):
    services.suspend_job(job)
    before = timezone.now()
    services.resume_job(job)
    job.refresh_from_db()
    assert (job.state, job.reason) == (JobState.QUEUED, "Resumed") and job.queued_at >= before
    assert {(r.state, r.attempt, r.exit_code) for r in job.replicas.all()} == {(ReplicaState.PENDING, 1, None)}


def test_resume_waits_until_the_replicas_have_stopped(job):
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job.replicas.update(state=ReplicaState.RUNNING)
    job.refresh_from_db()
    services.suspend_job(job)
    with pytest.raises(ValidationError, match="still stopping"):
        services.resume_job(job)
    job.replicas.update(state=ReplicaState.TERMINATED, reason="Suspended")
    services.resume_job(job)
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED


def test_a_suspended_job_frees_its_quota_and_waits_its_turn_in_the_queue_on_resume(alice, job, pkg, datacenter):
    datacenter.quotas.update(max_running_jobs=1)
    services.suspend_job(job)
    other = services.submit_job(alice, {"name": "other", "package": pkg, "entry": "python train.py"})
    assert queue.admit(datacenter).admitted == [other.pk]  # the suspended job holds nothing
    services.resume_job(job)
    queue.admit(datacenter)
    job.refresh_from_db()
    assert (job.state, job.reason, job.queue_position) == (JobState.QUEUED, "QuotaFull", 1)
    services.kill_job(other)
    assert queue.admit(datacenter).admitted == [job.pk]


def test_only_queued_or_started_jobs_suspend_and_only_suspended_ones_resume(job):
    with pytest.raises(ValidationError, match="only a suspended job"):
        services.resume_job(job)
    finish(job)
    with pytest.raises(ValidationError, match=r"only a queued or running job can be suspended \(it is Succeeded\)"):
        services.suspend_job(job)
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED


def test_api_suspend_and_resume(alice_api, job):
    res = alice_api.post("/api/v2/jobs/fit/suspend/")
    assert res.status_code == 200 and res.json()["state"] == "Suspended"
    res = alice_api.post("/api/v2/jobs/fit/suspend/")
    assert res.status_code == 400 and "it is Suspended" in res.json()["state"][0]
    res = alice_api.post("/api/v2/jobs/fit/resume/")
    assert res.status_code == 200 and res.json()["state"] == "Queued"
    assert alice_api.get("/api/v2/jobs/?state=Queued").json()["results"][0]["name"] == "fit"


def test_a_suspended_job_can_be_killed_and_deleted(alice, job, pkg):
    services.suspend_job(job)
    assert services.kill_job(job)
    job.refresh_from_db()
    assert job.state == JobState.KILLED
    other = services.submit_job(alice, {"name": "other", "package": pkg, "entry": "python train.py"})
    services.suspend_job(other)
    services.delete_job(other)
    assert Job.objects.get(pk=other.pk).deleting


def test_page_buttons_follow_the_state(web, job):
    page = web.get("/jobs/fit/").content.decode()
    assert "/jobs/fit/suspend/" in page and "/jobs/fit/resume/" not in page and "Run again" in page
    assert "Edit and resubmit" in page
    assert web.post("/jobs/fit/suspend/").status_code == 302
    page = web.get("/jobs/fit/").content.decode()
    assert "/jobs/fit/resume/" in page and "/jobs/fit/suspend/" not in page
    assert web.post("/jobs/fit/resume/").status_code == 302
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    res = web.post("/jobs/fit/resume/", follow=True)  # not suspended: said, not a 500
    assert "only a suspended job can be resumed" in res.content.decode()


def test_legacy_job_list_shows_a_suspended_job_as_kubernetes_does(alice, job):
    from legacy.serializers.shapes import job_list

    services.suspend_job(job)
    item = job_list([Job.objects.get(pk=job.pk)])["items"][0]
    assert item["status"]["conditions"][0]["type"] == "Suspended"
    assert item["status"]["active"] is None
