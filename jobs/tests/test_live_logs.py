"""Live logs pushed as they are written: the watch loop's follower against uvicorn, the real Redis
channel layer and websocket viewers, with a writer appending to a replica's log file."""

import itertools
import json
import os
import threading
import time
from contextlib import ExitStack, contextmanager

import pytest
from websockets.sync.client import connect

from accounts.services import issue_token
from core import metrics_store
from jobs import services
from jobs.backends.base import Watcher
from jobs.live import logfollow, logstore
from jobs.models import Job, JobState
from jobs.watch import WatchLoop
from tests.support import LiveASGI, make_package, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

POLL = 600.0  # the loop's passes, far apart: what arrives sooner was pushed on the write itself


class PushesLogs(Watcher):
    """Only the log push of each watched job (the replicas' states are not the test's concern)."""

    passes = 0

    def start(self) -> None:
        pass

    def tick(self, ctx) -> None:
        for job in ctx.jobs_to_watch():
            ctx.push_logs(job)
        self.passes += 1

    def stop(self) -> None:
        pass


@pytest.fixture
def running(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    return job


@contextmanager
def loop_running(interval: float):
    watcher = PushesLogs("test")
    loop = WatchLoop([watcher])
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop, interval), daemon=True)
    thread.start()
    try:
        wait_for(lambda: watcher.passes > 0, 30, "the loop's first pass")
        yield loop
    finally:
        stop.set()
        thread.join(10)


@contextmanager
def watching(job, interval: float):
    with loop_running(interval) as loop:
        replica = job.replicas.get()
        wait_for(lambda: (job.pk, replica.name) in loop.logs.offsets, 30, "the first pass to follow the replica")
        yield loop


@pytest.fixture
def loop(running):
    with watching(running, POLL) as loop:
        assert loop.logs.inotify
        yield loop


class Viewer(threading.Thread):
    """A websocket viewer of the job: keeps every pushed log message, and when it came."""

    def __init__(self, stack: ExitStack, url: str, token: str):
        super().__init__(daemon=True)
        self.ws = stack.enter_context(connect(url, additional_headers={"Authorization": f"Token {token}"},
                                              open_timeout=10))
        assert json.loads(self.ws.recv(timeout=10))["type"] == "job"
        self.pushes: list[tuple[float, dict]] = []

    def run(self) -> None:
        try:
            for frame in self.ws:
                message = json.loads(frame)
                if message["type"] == "log":
                    self.pushes.append((time.monotonic(), message))
        except Exception:  # noqa: BLE001 - closed by the test
            pass

    def text(self) -> str:
        return "".join(m["text"] for _, m in list(self.pushes))


@contextmanager
def viewers(alice, job, count: int):
    with ExitStack() as stack:
        server = stack.enter_context(LiveASGI())
        url = server.url.replace("http://", "ws://") + f"/ws/jobs/{job.name}/"
        token = issue_token(alice)
        started = [Viewer(stack, url, token) for _ in range(count)]
        for v in started:
            v.start()
        yield started


def test_a_line_reaches_viewers_on_its_write_not_the_next_pass(alice, running, loop):
    with viewers(alice, running, 1) as (viewer,):
        replica = running.replicas.get()
        written = time.monotonic()
        logstore.append(replica, b"step 1 loss 0.5\n")  # the first line: its directory is new too
        wait_for(lambda: viewer.text() == "step 1 loss 0.5\n", 20, lambda: f"the pushed line, got {viewer.pushes}")
        assert viewer.pushes[0][0] - written < 5  # a pass would only come after POLL seconds
        written = time.monotonic()
        logstore.append(replica, b"step 2 loss 0.4\n")
        wait_for(lambda: viewer.text().endswith("step 2 loss 0.4\n"), 20, "the second line")
        assert viewer.pushes[-1][0] - written < 5
        assert viewer.pushes[-1][1]["offset"] == len("step 1 loss 0.5\n")


def test_without_inotify_the_passes_still_push(alice, running, settings):
    settings.LOG_INOTIFY = False
    with watching(running, 0.2) as loop, viewers(alice, running, 1) as (viewer,):
        assert not loop.logs.inotify
        logstore.append(running.replicas.get(), b"epoch 1\n")
        wait_for(lambda: viewer.text() == "epoch 1\n", 20, lambda: f"the line, got {viewer.pushes}")


def test_several_viewers_get_a_fast_writers_lines_once_each_in_few_messages(alice, running, loop):
    replica = running.replicas.get()
    lines = [f"line {n:06d} {'x' * 40}\n" for n in range(15_000)]
    expected = "".join(lines)
    # All within one pass's share (past it a pass skips to recent lines, and viewers fetch the gap:
    # test_a_pass_pushes_a_bounded_part_of_a_log_that_grew_by_much_from_a_recent_line), however slow
    # the passes come.
    assert len(expected) < logfollow.MAX_PASS
    with viewers(alice, running, 5) as started:
        path = logstore.path(replica)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            for line in lines:  # one write per line, as a training program flushing its prints
                f.write(line)
                f.flush()
        for v in started:
            wait_for(lambda v=v: len(v.text()) >= len(expected), 60,
                     lambda v=v: f"all lines, got {len(v.text())} of {len(expected)} characters")
        for v in started:
            assert v.text() == expected  # nothing lost, nothing twice, in order
            messages = [m for _, m in v.pushes]
            assert messages[0]["offset"] == 0
            assert all(a["next_offset"] == b["offset"] for a, b in itertools.pairwise(messages))
            assert len(messages) < len(lines) / 20  # batched, not a message per line


def test_each_push_is_timed_for_the_metrics(alice, running, loop):
    def pushes() -> float:
        return metrics_store.read(metrics_store.LOG_PUSH).buckets[-1][1]  # the +Inf bucket: every push

    before = pushes()
    logstore.append(running.replicas.get(), b"step 1 loss 0.5\n")
    wait_for(lambda: pushes() > before, 20, "a timed push")


def test_the_first_lines_of_a_job_starting_while_watched_reach_those_already_viewing(alice, running):
    Job.objects.filter(pk=running.pk).update(state=JobState.QUEUED)  # not watched yet
    replica = running.replicas.get()
    with loop_running(0.2), viewers(alice, running, 1) as (viewer,):
        logstore.append(replica, b"first\nsecond\n")  # before any pass follows the job
        Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
        wait_for(lambda: viewer.text() == "first\nsecond\n", 20, lambda: f"the first lines, got {viewer.pushes}")
        assert viewer.pushes[0][1]["offset"] == 0


def test_a_watcher_that_starts_pushes_new_lines_not_the_history_its_viewers_read(alice, running):
    replica = running.replicas.get()
    logstore.append(replica, b"history\n")
    with watching(running, POLL), viewers(alice, running, 1) as (viewer,):
        logstore.append(replica, b"new\n")
        wait_for(lambda: viewer.text() == "new\n", 20, lambda: f"the new line, got {viewer.pushes}")
        assert viewer.pushes[0][1]["offset"] == len(b"history\n")


def test_a_building_jobs_build_log_reaches_viewers_as_it_is_written(alice, running):
    Job.objects.filter(pk=running.pk).update(state=JobState.BUILDING)
    with loop_running(POLL) as loop, viewers(alice, running, 1) as (viewer,):
        wait_for(lambda: (running.pk, "build") in loop.logs.offsets, 30, "the pass to follow the build log")
        logstore.append_build(running, b"Collecting numpy\n")
        wait_for(lambda: viewer.text() == "Collecting numpy\n", 20, lambda: f"the build's line, got {viewer.pushes}")
        assert viewer.pushes[0][1]["replica"] == "build" and viewer.pushes[0][1]["offset"] == 0
        # Building on into Starting, the build log is still followed from where it was.
        Job.objects.filter(pk=running.pk).update(state=JobState.STARTING)
        logstore.append_build(running, b"Successfully installed numpy\n")
        wait_for(lambda: viewer.text().endswith("Successfully installed numpy\n"), 20, "the build's last line")


@pytest.mark.parametrize(("content", "start"), [
    (b"a\nb\n", 0),  # shorter than the window: all of it
    (b"x" * 10 + b"\nlast\n", 11),  # the first whole line inside the last 8 bytes
    (b"x" * 8 + b"\n" + b"1234567\n", 9),  # a line that starts right where the window does
    (b"y" * 20, 20),  # no line starts inside: nothing
])
def test_recent_lines_start_on_a_line_boundary_within_the_window(running, content, start):
    replica = running.replicas.get()
    logstore.append(replica, content)
    assert logstore.recent_line_start(replica, 8) == start


def test_the_follower_records_when_it_saw_each_logs_bytes(alice, running, loop):
    replica = running.replicas.get()
    before = time.time()
    logstore.append(replica, b"step 1 loss 0.5\n")
    wait_for(lambda: logstore.times(replica)[0], 20, "a time mark")
    offsets, seconds = logstore.times(replica)
    assert offsets == [16] and before - 1 <= seconds[0] <= time.time()
    [(text, at)] = logstore.timed_lines(replica, logstore.read(replica))
    assert text == "step 1 loss 0.5" and at == seconds[0]


@contextmanager
def following(job, monkeypatch):
    """A follower outside the loop, and the pushes it makes: (offset, text, next_offset) each."""
    sent: list[tuple[int, str, int]] = []
    monkeypatch.setattr(logfollow.notify, "log_data",
                        lambda job_id, name, offset, text, next_offset: sent.append((offset, text, next_offset)))
    follower = logfollow.LogFollower()
    try:
        follower.follow(job)  # first sight: from the log's end
        yield follower, sent
    finally:
        follower.close()


def test_a_pass_pushes_a_bounded_part_of_a_log_that_grew_by_much_from_a_recent_line(running, monkeypatch):
    # The loop is every job's: a job's log grown by gigabytes at once (its stdout ftruncated to
    # a sparse file, no newline) must not hold a pass while all of it goes out.
    replica = running.replicas.get()
    logstore.append(replica, b"step 1\n")
    with following(running, monkeypatch) as (follower, sent):
        os.truncate(logstore.path(replica), 16 << 20)
        end = logstore.append(replica, b"\nstep 2\n")
        follower.follow(running)
    assert sum(len(text) for _, text, _ in sent) <= 8 * logfollow.MAX_PUSH  # a few pushes, not 16 MiB
    assert sent == [(end - 7, "step 2\n", end)]  # what is skipped, viewers fetch from the log API
    assert follower.offsets[(running.pk, replica.name)] == end


def test_a_log_that_shrank_is_pushed_again_from_its_start(running, monkeypatch):
    replica = running.replicas.get()
    logstore.append(replica, b"step 1\nstep 2\n")
    with following(running, monkeypatch) as (follower, sent):
        os.truncate(logstore.path(replica), 0)  # the job truncated its stdout
        logstore.append(replica, b"again\n")
        follower.follow(running)
    assert sent == [(0, "again\n", 6)]
