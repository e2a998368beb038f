"""The job list page filters with the API's FilterSet: same parameter names, same meaning."""

import re

import pytest

from jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def jobs(alice, bob, datacenter):
    def make(user, name, state):
        return Job.objects.create(user=user, datacenter=datacenter, name=name, state=state, mode="ps", pservers=1,
                                  trainers=1, package=f"/pfs/local/home/{user.username}/pkg", entry="python train.py")

    make(alice, "queued-one", "Queued")
    make(alice, "running-one", "Running")
    make(alice, "done-one", "Succeeded")
    make(alice, "failed-one", "Failed")
    make(bob, "bobs-running", "Running")


def names(response) -> set[str]:
    assert response.status_code == 200
    return set(re.findall(r'<td><a href="/jobs/([^/"]+)/">', response.content.decode()))


def test_the_page_lists_only_ones_own_jobs(web, jobs):
    assert names(web.get("/jobs/")) == {"queued-one", "running-one", "done-one", "failed-one"}


def test_active_true_and_false_split_jobs_as_the_api_does(web, jobs):
    assert names(web.get("/jobs/?active=true")) == {"queued-one", "running-one"}
    assert names(web.get("/jobs/?active=false")) == {"done-one", "failed-one"}


def test_state_takes_one_or_several_states(web, jobs):
    assert names(web.get("/jobs/?state=Running")) == {"running-one"}
    assert names(web.get("/jobs/?state=Failed&state=Succeeded")) == {"done-one", "failed-one"}


def test_values_the_filters_cannot_read_are_ignored_not_a_server_error(web, jobs):
    assert names(web.get("/jobs/?state=Nonsense&active=maybe")) == {"queued-one", "running-one", "done-one",
                                                                       "failed-one"}


def test_pages_keep_the_filters(web, alice, datacenter):
    for i in range(30):
        Job.objects.create(user=alice, datacenter=datacenter, name=f"job-{i}", state="Succeeded", mode="ps",
                           pservers=1, trainers=1, package="/pfs/local/home/alice/pkg", entry="python train.py")
    html = web.get("/jobs/?active=false").content.decode()
    older = re.search(r'<a href="\?([^"]+)">older', html).group(1).replace("&amp;", "&")
    assert "active=false" in older
    assert len(names(web.get(f"/jobs/?{older}"))) == 5


def test_an_any_choice_sent_empty_by_the_page_form_filters_nothing(web, jobs):
    assert names(web.get("/jobs/?active=true&state=")) == {"queued-one", "running-one"}
    assert names(web.get("/jobs/?active=&state=Failed")) == {"failed-one"}


def test_the_api_takes_an_empty_choice_as_no_filter_and_its_schema_says_so(alice_api, jobs):
    import yaml

    body = alice_api.get("/api/v2/jobs/?mode=&active=").json()
    assert len(body["results"]) == 4
    schema = yaml.safe_load(alice_api.get("/api/v2/schema/").content)
    params = {p["name"]: p["schema"] for p in schema["paths"]["/api/v2/jobs/"]["get"]["parameters"]}
    assert "" in params["mode"]["enum"] and "" in params["active"]["enum"]


def test_name_search_finds_jobs_by_part_of_their_name_in_any_case(web, alice_api, jobs):
    assert names(web.get("/jobs/?name=ONE")) == {"queued-one", "running-one", "done-one", "failed-one"}
    assert names(web.get("/jobs/?name=run")) == {"running-one"}
    api = {j["name"] for j in alice_api.get("/api/v2/jobs/?name=run").json()["results"]}
    assert api == {"running-one"}  # bob's "bobs-running" is never seen


def test_the_datacenter_filter_shows_once_there_are_several(web, alice, jobs, datacenter):
    from accounts.models import Datacenter

    assert 'name="datacenter__name"' not in web.get("/jobs/").content.decode()
    other = Datacenter.objects.create(name="gpu", backend="local")
    Job.objects.create(user=alice, datacenter=other, name="on-gpu", state="Queued", mode="ps", pservers=1,
                       trainers=1, package="/pfs/gpu/home/alice/pkg", entry="python train.py")
    assert 'name="datacenter__name"' in web.get("/jobs/").content.decode()
    assert names(web.get("/jobs/?datacenter__name=gpu")) == {"on-gpu"}


def test_rows_show_how_long_a_finished_job_ran(web, alice, datacenter):
    from datetime import timedelta

    from django.utils import timezone

    start = timezone.now() - timedelta(hours=2)
    Job.objects.create(user=alice, datacenter=datacenter, name="timed", state="Succeeded", mode="ps", pservers=1,
                       trainers=1, package="/pfs/local/home/alice/pkg", entry="python train.py",
                       started=start, finished=start + timedelta(minutes=2, seconds=5))
    assert "<td>2m 05s</td>" in web.get("/jobs/").content.decode()


def test_each_row_shows_what_the_template_filters_and_url_tag_would(alice, bob, datacenter, settings):
    # job_page.list_rows makes each cell's text once per row (the template reads them as they are):
    # the same as the {% url %}, |date:"c" and |timesince it stands for, in any time zone.
    from datetime import timedelta

    from django.template import Context, Template
    from django.urls import reverse
    from django.utils import timezone

    from jobs import job_page

    made = timezone.now() - timedelta(days=3, hours=5, minutes=7, seconds=11, microseconds=4)
    jobs = [Job.objects.create(user=user, datacenter=datacenter, name=name, state="Succeeded", mode="ps",
                               pservers=2, trainers=3, package="/p", entry="x", created=made,
                               finished=made + timedelta(minutes=61))
            for user, name in ((alice, "Sweep.v2-07"), (alice, "x"), (bob, "bobs.one"))]
    settings.TIME_ZONE = "Asia/Kolkata"  # not UTC: the times are shown in the current zone
    filters = Template("{{ d|date:'c' }}|{{ d|timesince }}|{{ f|timesince }}")
    with timezone.override("Asia/Kolkata"):
        now = timezone.now()
        rows = job_page.list_rows(jobs, now, viewer_id=alice.pk)
        for job, row in zip(jobs, rows, strict=True):
            shown = filters.render(Context({"d": job.created, "f": job.finished}))
            assert "|".join([row["created"], row["submitted_ago"], row["finished_ago"]]) == shown
            assert row["created"].endswith("+05:30")
    own = [reverse("jobs:detail", args=[job.name]) for job in jobs[:2]]
    assert [row["url"] for row in rows] == [*own, reverse("admin:jobs_job_change", args=[jobs[2].pk])]
    assert [row["owner"] for row in rows] == ["", "", "bob"]
    assert (rows[0]["pservers"], rows[0]["trainers"], rows[0]["run_time"], rows[0]["state_class"]) == (
        "2", "3", "", "succeeded")
