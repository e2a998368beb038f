# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Pod logs into the durable per-replica files: every line once, across dropped streams, a
restarted watcher, a crash between writing a log and its cursor, and pod deletion."""

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from jobs.backends.kubernetes.logs import Cursor, Position, parse_ts
from jobs.live import logstore
from jobs.models import JobState
from tests.support import wait_for

from .k8s_fixtures import Part, cluster, k8s_dc, launch, ns_of, part, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def text_of(job, name="trainer-0"):
    role, index = name.split("-")
    return logstore.read(job.replicas.get(role=role, index=int(index))).text


def running_trainer(alice, cluster, part):
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=1)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="watches")
    pod = cluster.run_job(ns, "fit-trainer")[0]
    cluster.pod_running(ns, pod)
    return job, ns, pod


def test_no_line_lost_or_doubled_across_dropped_streams(alice, cluster, part):
    job, ns, pod = running_trainer(alice, cluster, part)
    # A moment already past (a pod's lines are stamped in order: "d", stamped now, comes after it).
    same = (datetime.now(UTC) - timedelta(seconds=1)).replace(microsecond=123456)
    cluster.log(ns, pod, "a", "b", when=same)
    part.until(lambda: text_of(job) == "a\nb\n", what="first lines")
    cluster.drop_streams()
    cluster.log(ns, pod, "c", when=same)  # the same nanosecond as the last stored line
    cluster.log(ns, pod, "d")
    part.until(lambda: text_of(job) == "a\nb\nc\nd\n", what=lambda: f"lines after the drop, got {text_of(job)!r}")
    for i in range(3):
        cluster.drop_streams()
        cluster.log(ns, pod, f"e{i}")
    cluster.log(ns, pod, "last line, no newline at the end of the stream")
    cluster.pod_succeeded(ns, pod)
    want = "a\nb\nc\nd\ne0\ne1\ne2\nlast line, no newline at the end of the stream\n"
    part.until(lambda: text_of(job) == want, what="all lines")
    opens = [p for _, _, p in cluster.requests if p.startswith(f"/api/v1/namespaces/{ns}/pods/{pod}/log")]
    assert any("sinceTime=" in p for p in opens[1:]), opens


def test_a_restarted_watcher_resumes_from_the_cursor(alice, cluster, part):
    job, ns, pod = running_trainer(alice, cluster, part)
    cluster.log(ns, pod, "one", "two")
    part.until(lambda: text_of(job) == "one\ntwo\n", what="first lines")
    part.part.stop()
    cluster.drop_streams()
    cluster.log(ns, pod, "three")
    replica = job.replicas.get(role="trainer", index=0)
    with open(logstore.path(replica), "ab") as f:
        f.write(b"half a li")  # appended, but the watcher died before recording it
    again = Part()
    try:
        again.until(lambda: text_of(job) == "one\ntwo\nthree\n", what="resumed lines")
        cluster.pod_succeeded(ns, pod)
        again.until(lambda: Cursor(replica).pods and all(p.get("done") for p in Cursor(replica).pods.values()),
                    what="the pod's log marked complete")
    finally:
        again.part.stop()


def _late_to_hear_of_ends(listener):
    """A listener slow to hear that a pod ended, as a busy watch thread can be."""
    def late(kind, event, obj):
        if (obj.get("status") or {}).get("phase") == "Succeeded":
            time.sleep(1)
        listener(kind, event, obj)
    return late


def test_a_pods_log_is_complete_even_when_the_collector_hears_late_that_it_ended(alice, cluster, part):
    """The lifecycle ends the job, and so deletes its pods, on the state the log collector hears
    from: it must not act on a pod's end before the collector knows of it, or the follower finds
    the pod deleted and the log is never complete (as CI once saw)."""
    job, ns, pod = running_trainer(alice, cluster, part)
    state = part.watcher().state
    state.listeners[:] = [_late_to_hear_of_ends(listener) for listener in state.listeners]
    cluster.log(ns, pod, "first")
    part.until(lambda: text_of(job) == "first\n", what="the first line")
    cluster.log(ns, pod, "last")
    cluster.pod_succeeded(ns, pod)
    part.until(lambda: not cluster.store.find("pods", ns), what="the ended job's pod deleted")
    replica = job.replicas.get(role="trainer", index=0)
    part.until(lambda: all(p.get("done") for p in Cursor(replica).pods.values()),
               what="the pod's log marked complete")
    assert text_of(job) == "first\nlast\n"
    assert part.job(job).state == JobState.SUCCEEDED


def test_a_pods_log_is_complete_when_it_ends_between_the_drain_and_the_lifecycles_look(alice, cluster, part):
    """The pod ends after the watcher drained the job's followers but before the lifecycle reads
    the state (CI saw it on a busy machine): the lifecycle must not end the job, and so delete the
    pod, on pods whose followers were not drained."""
    job, ns, pod = running_trainer(alice, cluster, part)
    cluster.log(ns, pod, "first")
    part.until(lambda: text_of(job) == "first\n", what="the first line")
    state, logs = part.watcher().state, part.watcher().logs
    drain, open_log, ended = logs.drain, logs.open_log, threading.Event()

    def drain_then_end(job_id, *args, **kwargs):
        reading = drain(job_id, *args, **kwargs)
        if job_id == job.pk and not ended.is_set():
            ended.set()
            cluster.log(ns, pod, "last")
            cluster.pod_succeeded(ns, pod)
            wait_for(lambda: any(p["status"]["phase"] == "Succeeded" for p in state.pods_of(job.pk)[0]),
                     what="the watcher to see the pod end")
        return reading

    def open_log_slowly_once_ended(*args):
        if ended.is_set():
            time.sleep(1)  # a busy machine: the follower is slow to ask for the rest
        return open_log(*args)

    logs.drain, logs.open_log = drain_then_end, open_log_slowly_once_ended
    cluster.pod_running(ns, pod)  # a change to the pod: the watcher syncs the job, draining it first
    part.until(lambda: not cluster.store.find("pods", ns), what="the ended job's pod deleted")
    assert ended.is_set()
    replica = job.replicas.get(role="trainer", index=0)
    part.until(lambda: all(p.get("done") for p in Cursor(replica).pods.values()),
               what="the pod's log marked complete")
    assert text_of(job) == "first\nlast\n"
    assert part.job(job).state == JobState.SUCCEEDED


def _node_slow_from_now(logs, answer: threading.Event) -> list[str]:
    """Log requests from now on (not the streams already open) get no answer until `answer` is
    set; the list records each request held so."""
    open_log, held = logs.open_log, []

    def open_log_once_answered(namespace, name, since):
        held.append(name)
        answer.wait(60)
        return open_log(namespace, name, since)

    logs.open_log = open_log_once_answered
    return held


def test_an_ended_replica_waits_for_its_logs_end_however_slow_the_node(alice, cluster, part):
    """The job ends only once the pod's last lines are stored, and the watch loop is not held
    up meanwhile (it used to wait 3 s per pod, then delete the pod under its follower)."""
    job, ns, pod = running_trainer(alice, cluster, part)
    cluster.log(ns, pod, "first")
    part.until(lambda: text_of(job) == "first\n", what="the first line")
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")  # the follower does not wait for it
    answer = threading.Event()
    held = _node_slow_from_now(part.watcher().logs, answer)
    try:
        cluster.log(ns, pod, "last")
        cluster.pod_succeeded(ns, pod)
        wait_for(lambda: held, what="the follower to ask for the rest of the log")
        assert part.passes_in_thread(3).wait(30), "the watch loop waited for the log"
        assert part.job(job).state == JobState.RUNNING
        assert cluster.store.find("pods", ns)
    finally:
        answer.set()
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="the job to end")
    replica = job.replicas.get(role="trainer", index=0)
    assert all(p.get("done") for p in Cursor(replica).pods.values())
    assert text_of(job) == "first\nlast\n"


def test_a_job_ends_without_its_logs_end_once_the_node_has_not_answered_for_long(alice, cluster, part, monkeypatch):
    from jobs.backends.kubernetes import logs

    monkeypatch.setattr(logs, "LOG_GRACE_SECONDS", 1.0)
    job, ns, pod = running_trainer(alice, cluster, part)
    answer = threading.Event()
    held = _node_slow_from_now(part.watcher().logs, answer)
    try:
        cluster.pod_succeeded(ns, pod)
        wait_for(lambda: held, what="the follower to ask for the log")
        part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="the job to end all the same")
    finally:
        answer.set()


def test_logs_survive_the_pods(alice, cluster, part):
    job, ns, pod = running_trainer(alice, cluster, part)
    cluster.log(ns, pod, "trained")
    part.until(lambda: text_of(job) == "trained\n", what="the line")
    cluster.store.delete("pods", ns, pod)
    part.tick()
    assert text_of(job) == "trained\n"


def test_position_skips_exactly_what_was_stored():
    pos = Position("2026-01-01T00:00:01.5Z", 2)  # two lines at .5 s were stored
    lines = [b"2026-01-01T00:00:01.1Z old", b"2026-01-01T00:00:01.5Z x", b"2026-01-01T00:00:01.5Z y",
             b"2026-01-01T00:00:01.5Z z", b"2026-01-01T00:00:01.50000001Z w", b"2026-01-01T00:00:02Z v"]
    assert pos.take(lines) == [b"z\n", b"w\n", b"v\n"]
    assert (pos.stamp, pos.count) == ("2026-01-01T00:00:02Z", 1)
    assert parse_ts("2026-01-01T00:00:01.1Z") > parse_ts("2026-01-01T00:00:01.09Z")  # not string order


@pytest.mark.parametrize("status", [500, 502])
def test_an_unreadable_pod_log_is_explained_to_viewers_then_caught_up(alice, alice_api, cluster, part, client,
                                                                       status):
    """The kubelet does not answer: the API, the page and the websocket say why the log is not
    coming in, the follower backs off, and once the node answers the lines arrive and the
    explanation goes."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from jobs.live import notify
    job, ns, pod = running_trainer(alice, cluster, part)
    cluster.log(ns, pod, "before")
    part.until(lambda: text_of(job) == "before\n", what="the first line")
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(notify.group(job.pk), channel)
    client.force_login(alice)

    cluster.fail("GET", rf"/api/v1/namespaces/{ns}/pods/{pod}/log", status=status, times=5)
    cluster.drop_streams()
    cluster.log(ns, pod, "while the node is away")

    def api_notice():
        return alice_api.get(f"/api/v2/jobs/{job.name}/logs/").json()[0]["notice"]

    notice = part.until(api_notice, timeout=20, what="the notice in the API")
    assert f"pod {pod} cannot be read" in notice and f"answered {status}" in notice
    page = client.get(reverse("jobs:log", args=[job.name, "trainer-0"])).content.decode()
    assert f"pod {pod} cannot be read" in page
    async def next_notice():
        while (msg := await asyncio.wait_for(layer.receive(channel), 10))["type"] != "log.notice":
            pass  # job.changed pushes come too
        return msg["notice"]

    assert f"pod {pod} cannot be read" in async_to_sync(next_notice)()

    part.until(lambda: text_of(job) == "before\nwhile the node is away\n", timeout=30, what="the lines caught up")
    part.until(lambda: api_notice() == "", what="the notice cleared")


def test_backoff_grows_and_is_capped():
    from jobs.backends.kubernetes.logs import BACKOFF_CAP_SECONDS, backoff

    assert all(0.1 <= backoff(1) <= 0.4 for _ in range(20))
    assert all(backoff(4) <= 3.2 for _ in range(20)) and max(backoff(6) for _ in range(20)) > 3.2
    assert all(BACKOFF_CAP_SECONDS / 2 <= backoff(n) <= BACKOFF_CAP_SECONDS for n in (10, 100) for _ in range(20))
