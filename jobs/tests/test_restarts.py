"""Restart policies with real processes on the local backend: replica and gang restarts with
their backoff and limit, permanent exit codes, a parameter server that ends by itself."""

import json

import pytest

from jobs import services
from jobs.backends.local.backend import LocalBackend
from jobs.lifecycle import restarts
from jobs.lifecycle.sync import sync_job
from jobs.live import logstore
from jobs.tasks import launch_job
from tests import support
from tests.support import REACH_PSERVERS, make_package, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

# Every start appends its time to starts.json in its working copy (kept across attempts), so a
# test reads when each attempt began; FAILS_<role>_<index> attempts fail with EXIT_CODE. It is
# replaced whole, so a test reading it while an attempt starts never sees it half written.
WORKLOAD = """
import json, os, socket, sys, time
starts = json.load(open("starts.json")) if os.path.exists("starts.json") else []
starts.append(time.time())
json.dump(starts, open("starts.json.new", "w"))
os.replace("starts.json.new", "starts.json")
role = os.environ.get("TRAINING_ROLE", "TRAINER").lower()
index = os.environ["PADDLE_TRAINER_ID"] if role == "trainer" else "0"
attempt = len(starts) - 1
print(role, index, "attempt", attempt, flush=True)
if attempt < int(os.environ.get(f"FAILS_{role}_{index}", "0")):
    sys.exit(int(os.environ.get("EXIT_CODE", "3")))
if role == "pserver":
    server = socket.create_server((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
    if os.environ.get("PSERVER_EXITS"):
        sys.exit(0)
    time.sleep(600)
""" + REACH_PSERVERS + """
if os.environ.get("TRAINERS_WAIT"):
    time.sleep(600)
"""


@pytest.fixture(autouse=True)
def quick_backoff(settings):
    settings.RESTART_BACKOFF_SECONDS = 0.5
    settings.RESTART_BACKOFF_MAX_SECONDS = 10


def submit(user, name, **fields):
    pkg = make_package(user, name, {"train.py": WORKLOAD})
    data = {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective", "pservers": 0,
            "trainers": 2, **fields}
    return services.submit_job(user, data)


def run_until_done(job, timeout=60):
    return support.run_until_done(job, timeout)


def starts(job, name):
    role, index = name.split("-")
    replica = job.replicas.get(role=role, index=int(index))
    return json.loads((LocalBackend(job.datacenter).replica_dir(replica) / "work" / "starts.json").read_text())


def restarting_events(job):
    return list(job.events.filter(reason="Restarting").order_by("created", "id"))


def test_a_failed_trainer_alone_restarts_with_exponential_backoff_until_it_succeeds(alice):
    job = run_until_done(submit(alice, "flaky", max_restarts=3, env={"FAILS_trainer_1": "2"}))

    assert (job.state, job.reason) == ("Succeeded", "Completed")
    assert job.restarts == 0  # no gang restart
    t0, t1 = job.replicas.get(index=0), job.replicas.get(index=1)
    assert (t0.restarts, t0.attempt, len(starts(job, "trainer-0"))) == (0, 0, 1)  # never restarted
    assert (t1.restarts, t1.attempt, t1.state, t1.exit_code) == (2, 2, "Succeeded", 0)
    events = restarting_events(job)
    assert [e.replica_id for e in events] == [t1.pk, t1.pk]
    assert "trainer-1 exited with code 3: restart 1 of 3 in 0.5 s" in events[0].message
    assert "trainer 1 attempt 0" in events[0].message  # the log tail that caused it
    assert "trainer 1 attempt 1" in events[1].message and "restart 2 of 3 in 1 s" in events[1].message
    backoff = list(job.events.filter(replica=t1, reason="BackOff").values_list("message", flat=True))
    assert len(backoff) == 2 and "attempt 1" in backoff[0] and "attempt 2" in backoff[1]
    # Each attempt starts no sooner than its backoff after the failure was seen: 0.5 s, then 1 s.
    begun = starts(job, "trainer-1")
    assert begun[1] - events[0].created.timestamp() >= 0.5
    assert begun[2] - events[1].created.timestamp() >= 1.0
    # One log across attempts.
    log = logstore.read(t1).text
    assert all(f"trainer 1 attempt {n}" in log for n in range(3))


def test_a_trainer_failing_past_max_restarts_fails_the_job(alice):
    job = run_until_done(submit(alice, "hopeless", trainers=1, max_restarts=2, env={"FAILS_trainer_0": "99"}))

    assert (job.state, job.reason) == ("Failed", "RestartLimit")
    assert "trainer-0 exited with code 3 after 2 of 2 restarts" in job.message
    assert "trainer 0 attempt 2" in job.message
    t0 = job.replicas.get()
    assert (t0.state, t0.restarts, t0.attempt) == ("Failed", 2, 2)
    assert len(starts(job, "trainer-0")) == 3
    assert len(restarting_events(job)) == 2


def test_the_datacenters_default_limit_applies_when_the_job_sets_none(alice, datacenter):
    datacenter.default_max_restarts = 1
    datacenter.save()
    job = run_until_done(submit(alice, "dflt", trainers=1, env={"FAILS_trainer_0": "99"}))

    assert (job.state, job.reason) == ("Failed", "RestartLimit")
    assert len(starts(job, "trainer-0")) == 2


@pytest.mark.parametrize(("codes", "exit_code"), [("2", 2), ("7, 9", 9)])
def test_a_permanent_exit_code_fails_the_job_at_once(alice, codes, exit_code):
    job = run_until_done(submit(alice, "perm", trainers=1, max_restarts=3, permanent_exit_codes=codes,
                                env={"FAILS_trainer_0": "99", "EXIT_CODE": str(exit_code)}))

    assert (job.state, job.reason) == ("Failed", "PermanentExitCode")
    assert f"trainer-0 exited with code {exit_code}, which the job marks permanent" in job.message
    assert len(starts(job, "trainer-0")) == 1
    assert restarting_events(job) == []


def test_gang_mode_restarts_every_replica_after_the_backoff(alice, alice_api, client):
    job = run_until_done(submit(alice, "gang", mode="ps", pservers=1, trainers=2, restart_mode="gang",
                                max_restarts=2, env={"FAILS_trainer_1": "1"}))

    assert (job.state, job.reason) == ("Succeeded", "Completed")
    assert job.restarts == 1
    assert {r.name: (r.attempt, r.restarts) for r in job.replicas.all()} == {
        "pserver-0": (1, 1), "trainer-0": (1, 1), "trainer-1": (1, 1)}
    [event] = restarting_events(job)
    assert event.replica.name == "trainer-1" and event.replica_id
    assert "trainer-1 exited with code 3: every replica restarts (1 of 2) in 0.5 s" in event.message
    # Every replica started again, none before the backoff had passed (a replica stopped for the
    # restart may have been stopped before its program began: only the last start is certain).
    assert len(starts(job, "trainer-1")) == 2
    for name in ("pserver-0", "trainer-0", "trainer-1"):
        assert starts(job, name)[-1] - event.created.timestamp() >= 0.5
    shown = alice_api.get(f"/api/v2/jobs/{job.name}/").json()
    assert shown["restarts"] == 1 and {r["restarts"] for r in shown["replicas"]} == {1}
    client.force_login(alice)
    page = client.get(f"/jobs/{job.name}/?part=status", headers={"HX-Request": "true"}).content.decode()
    assert '<dt>Job restarts</dt><dd class="restarts" title="every replica restarted together">1</dd>' in page


def test_a_failed_pserver_restarts_the_whole_job_in_replica_mode(alice):
    job = run_until_done(submit(alice, "psfail", mode="ps", pservers=1, trainers=2, max_restarts=1,
                                env={"FAILS_pserver_0": "1", "EXIT_CODE": "5"}))

    assert (job.state, job.reason) == ("Succeeded", "Completed")
    assert job.restarts == 1  # a pserver failure is counted on the job
    [event] = restarting_events(job)
    assert event.replica.name == "pserver-0" and "pserver-0 exited with code 5" in event.message
    assert len(starts(job, "pserver-0")) == 2
    assert {r.name: (r.attempt, r.restarts) for r in job.replicas.all()} == {
        "pserver-0": (1, 1), "trainer-0": (1, 1), "trainer-1": (1, 1)}


def test_gang_restarts_past_the_limit_fail_the_job(alice):
    job = run_until_done(submit(alice, "ganglimit", trainers=2, restart_mode="gang", max_restarts=1,
                                env={"FAILS_trainer_0": "99", "TRAINERS_WAIT": "1"}))

    assert (job.state, job.reason) == ("Failed", "RestartLimit")
    assert "after 1 of 1 restarts" in job.message
    assert job.restarts == 1
    assert job.replicas.get(index=1).attempt == 1  # the healthy trainer was restarted with it
    assert len(starts(job, "trainer-0")) == 2


def test_a_pserver_exiting_0_while_trainers_run_says_so(alice):
    job = run_until_done(submit(alice, "psexit", mode="ps", pservers=1, trainers=2,
                                env={"PSERVER_EXITS": "1", "TRAINERS_WAIT": "1"}))

    assert (job.state, job.reason) == ("Failed", "PserverExited")
    assert job.message.startswith("pserver-0 exited 0 while 2 of 2 trainers were still running")


def test_a_due_restart_is_performed_by_one_caller_only(alice, alice_api, client, monkeypatch):
    job = submit(alice, "once", trainers=1, max_restarts=1, env={"FAILS_trainer_0": "1", "TRAINERS_WAIT": "1"})
    launch_job(job.pk)

    def backing_off():
        job.refresh_from_db()
        sync_job(job)
        return job.replicas.get().restart_at

    wait_for(backing_off, 30, what="the trainer to fail and back off")
    # Backing off shows everywhere: Pending, BackOff, when and which attempt, one restart.
    [shown] = alice_api.get(f"/api/v2/jobs/{job.name}/").json()["replicas"]
    assert (shown["state"], shown["reason"], shown["restarts"], shown["attempt"]) == ("Pending", "BackOff", 1, 1)
    assert shown["message"].startswith("restart 1 of 1 at ") and shown["message"].endswith("(attempt 1)")
    client.force_login(alice)
    page = client.get(f"/jobs/{job.name}/?part=status", headers={"HX-Request": "true"}).content.decode()
    assert "BackOff" in page and shown["message"] in page
    replicas = list(job.replicas.all())
    calls = []
    real = LocalBackend.restart
    monkeypatch.setattr(LocalBackend, "restart", lambda self, j, rs: (calls.append([r.name for r in rs]),
                                                                      real(self, j, rs)))
    backend = LocalBackend(job.datacenter)
    wait_for(lambda: all(r.restart_at.timestamp() <= __import__("time").time() for r in replicas), 10,
             what="the backoff to pass")
    job.refresh_from_db()
    restarts.start_due(job, backend, replicas)
    restarts.start_due(job, backend, replicas)  # a second caller with the same (stale) view
    assert calls == [["trainer-0"]]
    wait_for(lambda: len(starts(job, "trainer-0")) == 2, 30, what="the second attempt to start")


def test_the_worker_and_watcher_restart_a_failed_trainer(system, alice):
    job = submit(alice, "watched", trainers=1, max_restarts=1, env={"FAILS_trainer_0": "1"})

    def ended():
        job.refresh_from_db()
        return job.state in ("Succeeded", "Failed", "Killed")

    wait_for(ended, 60, what=lambda: f"job to end (state {job.state}: {job.message})")
    assert (job.state, job.reason) == ("Succeeded", "Completed")
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.attempt) == (1, 1)
    [event] = restarting_events(job)
    assert starts(job, "trainer-0")[1] - event.created.timestamp() >= 0.5


def test_a_restarted_replica_shows_the_host_pid_of_its_sandbox_like_its_first_attempt(alice, alice_api):
    """The PID column (the replica's `pod`) is the host's pid of the process the keeper started
    (the sandbox around the program), in every attempt, on the page and in the API."""
    job = submit(alice, "pids", trainers=1, max_restarts=1, env={"FAILS_trainer_0": "1", "TRAINERS_WAIT": "1"})
    launch_job(job.pk)
    backend = LocalBackend(job.datacenter)

    def running_again():
        job.refresh_from_db()
        sync_job(job)
        replica = job.replicas.get()
        return replica if replica.attempt == 1 and replica.state == "Running" else None

    replica = wait_for(running_again, 60, what=lambda: f"the second attempt to run: {list(job.replicas.values())}")
    child = (backend.state_dir(replica) / "child.pid").read_text().strip()
    assert replica.pod == child and child.isdigit()
    assert support.psutil.Process(int(child)).name() in ("nsenter", "bwrap")  # a process of this host
    assert alice_api.get("/api/v2/jobs/pids/").json()["replicas"][0]["pod"] == child
