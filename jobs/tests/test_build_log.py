# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The job's `build` log (the runtime build's output: pip's, the cluster's image build): served by
/api/v2 and the page like a replica's log, with a state a follower can stop on, kept after the job,
and on Kubernetes copied from the build pod while it runs."""

import re

import pytest

from jobs import logs, services
from jobs.live import logstore
from jobs.models import JobState
from jobs.state.transitions import transition
from tests.support import make_package, wait_for

from .k8s_fixtures import cluster, k8s_dc, ns_of, part, watch  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": "", "requirements.txt": "numpy\n"})
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py",
                                       "mode": "collective", "trainers": 1})


def build_log(api, name="fit", **params):
    res = api.get(f"/api/v2/jobs/{name}/logs/", {"replica": "build", **params})
    assert res.status_code == 200, res.content
    [log] = res.json()
    return log


def test_the_build_log_is_read_like_a_replicas_with_the_builds_state(alice_api, job):
    assert build_log(alice_api)["state"] == "Pending"  # queued: the build has not begun
    transition(job, JobState.BUILDING, "Admitted", "building")
    assert logstore.build_log_path(job) == logstore.job_dir(job.pk) / "build.log"
    with logstore.open_build_log(job) as f:
        f.write(b"Collecting numpy\n")
    end = logstore.append_build(job, b"Installing collected packages: numpy\n")
    log = build_log(alice_api)
    assert log["state"] == "Running" and log["next_offset"] == end
    assert log["text"] == "Collecting numpy\nInstalling collected packages: numpy\n"
    # Followed from an offset like any log, without repeats.
    more = logstore.append_build(job, b"Successfully installed numpy\n")
    log = build_log(alice_api, offset=log["next_offset"])
    assert log["text"] == "Successfully installed numpy\n" and log["next_offset"] == more
    # All of the job's logs: the build's first, then the replicas'.
    res = alice_api.get("/api/v2/jobs/fit/logs/").json()
    assert [entry["replica"] for entry in res] == ["build", "trainer-0"]
    transition(job, JobState.STARTING, "Launching", "starting the replicas")
    assert build_log(alice_api, lines=1) | {"offset": 0} == {
        "replica": "build", "text": "Successfully installed numpy\n", "offset": 0, "next_offset": more,
        "state": "Succeeded", "notice": ""}
    # Kept after the job ends.
    transition(job, JobState.SUCCEEDED, "Succeeded", "done")
    assert build_log(alice_api)["text"].startswith("Collecting numpy\n")


@pytest.mark.parametrize(("ended", "state"), [(JobState.FAILED, "Failed"), (JobState.KILLED, "Terminated")])
def test_a_build_that_ended_the_job_says_how(alice_api, job, ended, state):
    transition(job, JobState.BUILDING, "Admitted", "building")
    logstore.append_build(job, b"ERROR: No matching distribution found for numpy\n")
    transition(job, ended, "RuntimeBuildFailed", "pip install failed")
    assert build_log(alice_api)["state"] == state


def test_a_job_killed_in_the_queue_never_built(alice_api, job):
    transition(job, JobState.KILLED, "Killed", "killed by the user")
    assert build_log(alice_api)["state"] == "Terminated"
    assert [entry["replica"] for entry in alice_api.get("/api/v2/jobs/fit/logs/").json()] == ["trainer-0"]


def test_only_the_owner_reads_the_build_log(bob_api, job):
    logstore.append_build(job, b"secret index url\n")
    assert bob_api.get("/api/v2/jobs/fit/logs/", {"replica": "build"}).status_code == 404


def current_tab(page: str) -> str:
    [tab] = re.findall(r'<a [^>]*data-log="([^"]+)"[^>]*class="current"', page)
    return tab


def test_the_page_opens_the_build_tab_while_the_job_builds(client, alice, job):
    client.force_login(alice)
    transition(job, JobState.BUILDING, "Admitted", "building")
    logstore.append_build(job, b"Collecting numpy\n")
    page = client.get("/jobs/fit/").content.decode()
    assert current_tab(page) == "build"
    panel = client.get("/jobs/fit/logs/build/").content.decode()
    assert "build · Running" in panel and 'data-replica="build"' in panel and "Collecting numpy" in panel
    download = client.get("/jobs/fit/logs/build/download/")
    assert b"".join(download.streaming_content) == b"Collecting numpy\n"
    transition(job, JobState.STARTING, "Launching", "starting")
    assert current_tab(client.get("/jobs/fit/").content.decode()) == "trainer-0"
    assert "build · Succeeded" in client.get("/jobs/fit/logs/build/").content.decode()


def test_the_build_state_is_the_latest_builds(job):
    """A resumed job builds again (its cached runtime, at once): the newest build counts."""
    for state in (JobState.BUILDING, JobState.RUNNING, JobState.SUSPENDED, JobState.QUEUED, JobState.BUILDING):
        transition(job, state, state, "")
    job.refresh_from_db()
    assert logs.build_state(job) == "Running"
    transition(job, JobState.FAILED, "RuntimeBuildFailed", "")
    job.refresh_from_db()
    assert logs.build_state(job) == "Failed"


@pytest.mark.django_db(transaction=True)
def test_the_cluster_image_builds_output_is_copied_into_the_build_log_as_it_runs(alice, k8s_dc, cluster, watch):
    from jobs.tasks import launch_job

    cluster.store.create("namespaces", None, {"metadata": {"name": "paddlecloud"}})
    k8s_dc.config = {**k8s_dc.config, "build": {"enabled": True, "registry": "registry.example.com/pc"}}
    k8s_dc.save()
    pkg = make_package(alice, "img", {"train.py": "", "requirements.txt": "numpy\n"}, datacenter="k8s")
    job = services.submit_job(alice, {"name": "img", "datacenter": "k8s", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "pservers": 0, "trainers": 1})
    ns = ns_of(job)
    launch_job.run(job.pk)  # starts the build; the watcher follows it
    wait_for(lambda: ("jobs", "img-build") in cluster.objects_in(ns), 20, "the build Job")
    [pod] = cluster.run_job(ns, "img-build")
    cluster.log(ns, pod, "INFO[0000] Retrieving image manifest python:3.11")
    cluster.pod_running(ns, pod)
    text = lambda: logstore.read(logstore.build_log(job)).text  # noqa: E731
    watch.until(lambda: "Retrieving image manifest" in text(), 20, "kaniko's first line in the build log")
    cluster.log(ns, pod, "Successfully installed numpy-1.26.4")
    watch.until(lambda: text().endswith("Successfully installed numpy-1.26.4\n"), 20, "the next line")
    cluster.job_condition(ns, "img-build", "Complete", "Completed", "")
    watch.until(lambda: watch.job(job).state != JobState.BUILDING, 20, "the launch continued")
    assert job.state == JobState.STARTING, job.message
    assert text() == "INFO[0000] Retrieving image manifest python:3.11\nSuccessfully installed numpy-1.26.4\n"
