"""The watch loop passes at once when a job changes state or a local replica's log is closed (it
ended), not at its next interval; after a wake-up it passes often while a job is being launched.
Each test runs the loop with an interval far longer than its deadline, so only a wake-up can make
the pass it waits for."""

import threading
import time

import pytest

from core import health
from jobs.backends.base import Watcher
from jobs.live import logstore, wake
from jobs.models import JobState, Replica
from jobs.state.transitions import transition
from jobs.watch import HURRY_INTERVAL, WatchLoop
from tests.support import make_job, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

INTERVAL = 60.0


class Recorder(Watcher):
    """Counts the passes; follows the jobs it is given, as the local watcher does."""

    def __init__(self) -> None:
        super().__init__("local")
        self.passes = 0
        self.passes_done = 0  # passes whose pushes (and so their log watches) are in place
        self.follow: list = []

    def start(self) -> None:
        pass

    def tick(self, ctx) -> None:
        self.passes += 1
        for job in self.follow:
            ctx.push_logs(job)
        self.passes_done += 1

    def stop(self) -> None:
        pass


@pytest.fixture
def loop():
    recorder = Recorder()
    watch = WatchLoop(watchers=[recorder])
    stopping = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stopping, INTERVAL), daemon=True)
    thread.start()
    wait_for(lambda: recorder.passes == 1, 30, what="the first pass")
    # The wake-up listener subscribes in a thread of its own: a change before that would be missed.
    wait_for(lambda: health.redis_client().pubsub_numsub(wake.channel())[0][1] >= 1, 30,
             what="the wake-up listener's subscription")
    yield recorder
    stopping.set()
    thread.join(30)


def test_a_job_changing_state_wakes_the_loop_at_once(loop, alice, datacenter):
    job = make_job(alice, datacenter, state=JobState.QUEUED)
    passes = loop.passes
    transition(job, JobState.BUILDING, "Preparing", from_states=[JobState.QUEUED])
    wait_for(lambda: loop.passes > passes, 10, what="a pass after the change")


def test_while_a_job_launches_the_loop_passes_every_hurry_interval(loop, alice, datacenter):
    job = make_job(alice, datacenter, state=JobState.QUEUED)
    transition(job, JobState.STARTING, "Launching", from_states=[JobState.QUEUED])
    wait_for(lambda: loop.passes >= 5, 10, what="passes while the job is starting")
    transition(job, JobState.RUNNING, "Running", from_states=[JobState.STARTING])
    time.sleep(1)
    settled = loop.passes
    time.sleep(20 * HURRY_INTERVAL + 1)
    assert loop.passes == settled  # nothing launching: back to the interval


def test_a_local_replica_closing_its_log_wakes_the_loop(loop, alice, datacenter, settings):
    job = make_job(alice, datacenter, state=JobState.RUNNING)
    replica = Replica.objects.create(job=job, role="trainer", index=0, state="Running")
    log = logstore.path(replica)
    log.parent.mkdir(parents=True, exist_ok=True)
    writer = open(log, "ab")  # noqa: SIM115 - written through the test, closed as the keeper does
    loop.follow.append(job)
    transition(job, JobState.RUNNING, "Restarted", from_states=[JobState.RUNNING])  # a pass that follows it
    wait_for(lambda: loop.passes_done >= 2, 10, what="the pass that follows the job")
    passes = loop.passes
    writer.write(b"last line\n")
    writer.close()  # as the keeper does once the replica's exit is recorded
    wait_for(lambda: loop.passes > passes, 10, what="a pass after the log was closed")
