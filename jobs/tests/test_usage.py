"""Replica CPU and memory: sampled from real processes by the watch loop, kept bounded, kept
after the job ends, served by the API."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs import services
from jobs.backends.local.backend import LocalBackend
from jobs.backends.local.watcher import LocalWatcher
from jobs.lifecycle.sync import sync_job
from jobs.live import usage
from jobs.live.usage import Usage
from jobs.models import Job, ReplicaSample
from jobs.tasks import launch_job
from jobs.watch import WatchLoop
from tests.support import job_processes, make_package, token_client, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

# Holds ~64 MiB and keeps one core busy until stopped.
BURNER = """
import time
hold = bytearray(64 * 1024 * 1024)
for i in range(0, len(hold), 4096):
    hold[i] = 1
print("holding", flush=True)
while True:
    sum(range(10000))
"""


def start(user, name: str, files: dict[str, str]) -> Job:
    pkg = make_package(user, name, files)
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py",
                                     "mode": "collective", "pservers": 0, "trainers": 1, "memory": "512Mi"})
    launch_job(job.pk)

    def running():
        sync_job(job)
        job.refresh_from_db()
        return job.state == "Running"

    wait_for(running, 30, what="the job to run")
    return job


def test_a_replica_burning_cpu_and_holding_memory_shows_both_and_keeps_them_after_the_end(alice, settings):
    settings.USAGE_SAMPLE_SECONDS = 0.2
    job = start(alice, "burn", {"train.py": BURNER})
    loop = WatchLoop([LocalWatcher("local")])
    trainer = job.replicas.get()

    def busy_and_big():
        loop.tick()
        last = usage.latest(trainer)
        # A low bar for CPU: the machine running the tests may be busy with others.
        return last and (last["cpu_percent"] or 0) > 5 and last["memory_bytes"] > 60 * 2**20

    wait_for(busy_and_big, 30, what=lambda: f"CPU and memory to show (latest {usage.latest(trainer)})")

    assert services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)  # what the stop_job task does
    wait_for(lambda: not job_processes(job), settings.KILL_GRACE_SECONDS + 10, what="processes to go")
    sync_job(job)
    job.refresh_from_db()
    assert job.state == "Killed"
    kept = ReplicaSample.objects.filter(replica=trainer).count()
    loop.tick()  # an ended job is not sampled again
    assert ReplicaSample.objects.filter(replica=trainer).count() == kept >= 2

    detail = token_client(alice).get(f"/api/v2/jobs/{job.name}/").json()
    latest = detail["replicas"][0]["usage"]
    assert latest["cpu_percent"] > 5 and latest["memory_bytes"] > 60 * 2**20
    series = token_client(alice).get(f"/api/v2/jobs/{job.name}/usage/").json()
    assert [s["replica"] for s in series] == ["trainer-0"]
    assert len(series[0]["samples"]) == kept
    assert series[0]["samples"][-1] == latest


def test_samples_are_taken_at_most_once_per_interval_per_job(alice, settings):
    settings.USAGE_SAMPLE_SECONDS = 3600
    job = start(alice, "idle", {"train.py": "import time\ntime.sleep(600)\n"})
    loop = WatchLoop([LocalWatcher("local")])
    for _ in range(5):
        loop.tick()
    assert ReplicaSample.objects.filter(replica__job=job).count() == 1


def test_only_the_newest_samples_are_kept_per_replica(alice, settings):
    settings.USAGE_SAMPLES_KEPT = 5
    job = services.submit_job(alice, {"name": "bounded", "package": make_package(alice, "bounded", {"t.py": ""}),
                                      "entry": "python t.py", "mode": "collective", "pservers": 0, "trainers": 2})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(12):
        # trainer-0 used 0.5 s of CPU per 1 s sample: 50 %; trainer-1 is not measured.
        usage.record(job, {("trainer", 0): Usage(memory_bytes=i, cpu_seconds=i * 0.5)}, now=t0 + timedelta(seconds=i))
    trainer0, trainer1 = job.replicas.order_by("index")
    points = usage.series(trainer0)
    assert [p["memory_bytes"] for p in points] == [7, 8, 9, 10, 11]
    assert {p["cpu_percent"] for p in points} == {50.0}
    assert usage.series(trainer1) == []


def test_a_shrinking_cpu_counter_gives_no_rate_and_a_backend_rate_is_kept_as_is(alice):
    job = services.submit_job(alice, {"name": "rates", "package": make_package(alice, "rates", {"t.py": ""}),
                                      "entry": "python t.py", "mode": "collective", "pservers": 0, "trainers": 1})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    usage.record(job, {("trainer", 0): Usage(memory_bytes=1, cpu_seconds=10.0)}, now=t0)
    usage.record(job, {("trainer", 0): Usage(memory_bytes=1, cpu_seconds=2.0)}, now=t0 + timedelta(seconds=1))
    usage.record(job, {("trainer", 0): Usage(memory_bytes=1, cpu_percent=250.0)}, now=t0 + timedelta(seconds=2))
    assert [p["cpu_percent"] for p in usage.series(job.replicas.get())] == [None, None, 250.0]


def test_another_users_job_usage_is_not_found(alice, bob):
    job = services.submit_job(alice, {"name": "mine", "package": make_package(alice, "mine", {"t.py": ""}),
                                      "entry": "python t.py"})
    assert token_client(bob).get(f"/api/v2/jobs/{job.name}/usage/").status_code == 404
    assert token_client(alice).get(f"/api/v2/jobs/{job.name}/usage/").status_code == 200


def test_the_job_page_shows_each_replicas_latest_usage_and_charts_its_series(client, alice, bob):
    job = services.submit_job(alice, {"name": "shown", "package": make_package(alice, "shown", {"t.py": ""}),
                                      "entry": "python t.py", "mode": "collective", "pservers": 0, "trainers": 2})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    usage.record(job, {("trainer", 0): Usage(memory_bytes=3 * 2**20, cpu_seconds=0.0)}, now=t0)
    usage.record(job, {("trainer", 0): Usage(memory_bytes=200 * 2**20, cpu_seconds=1.5)}, now=t0 + timedelta(seconds=2))
    client.force_login(alice)
    status = client.get("/jobs/shown/?part=status", headers={"HX-Request": "true"}).content.decode()
    assert "<td class=\"usage\">75%</td>" in status and "200.0\xa0MB" in status
    assert 'id="usage-chart"' in client.get("/jobs/shown/").content.decode()
    assert client.get("/jobs/shown/usage/").json() == {"replicas": {
        "trainer-0": {"time": [t0.timestamp(), t0.timestamp() + 2], "cpu": [None, 75.0], "memory": [3.0, 200.0]},
        "trainer-1": {"time": [], "cpu": [], "memory": []}}}
    client.force_login(bob)
    assert client.get("/jobs/shown/usage/").status_code == 404


def test_a_gap_without_samples_breaks_the_charts_line(alice, settings):
    settings.USAGE_SAMPLE_SECONDS = 5.0
    job = services.submit_job(alice, {"name": "gap", "package": make_package(alice, "gap", {"t.py": ""}),
                                      "entry": "python t.py", "mode": "collective", "pservers": 0, "trainers": 1})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for seconds in (0, 5, 10, 3600, 3605):  # suspended for an hour after 10 s
        usage.record(job, {("trainer", 0): Usage(memory_bytes=2**20, cpu_seconds=None, cpu_percent=50.0)},
                     now=t0 + timedelta(seconds=seconds))
    series = usage.chart_series(job)["trainer-0"]
    start = t0.timestamp()
    assert series["time"] == [start, start + 5, start + 10, start + 1805, start + 3600, start + 3605]
    assert series["cpu"] == [50.0, 50.0, 50.0, None, 50.0, 50.0]
    assert series["memory"] == [1.0, 1.0, 1.0, None, 1.0, 1.0]
