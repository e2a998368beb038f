"""`logs -f` and Client.logs(follow=True): waits while replicas are pending, stops when the job
has ended, and resumes after dropped connections without losing or repeating a line."""

from __future__ import annotations

import io
import re
import threading
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest
from django.db import connection
from tests.support import make_package, wait_for

from .conftest import Result, run_cli
from .proxy import CuttableProxy

pytestmark = pytest.mark.django_db(transaction=True)


def _set_states(job, job_state, replica_state):
    from jobs.models import Job, Replica

    Replica.objects.filter(job=job).update(state=replica_state)
    Job.objects.filter(pk=job.pk).update(state=job_state)


def _job(alice, name="fol", trainers=2):
    from jobs import services

    pkg = make_package(alice, name, {"train.py": "print(1)\n"})
    job = services.submit_job(alice, {"name": name, "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": trainers})
    return job, list(job.replicas.order_by("index"))


def test_follow_resumes_after_cut_connections_without_loss_or_repeats(live_server, alice):
    from accounts.services import issue_token
    from jobs.live import logstore
    from paddlectl import Client

    job, (t0, t1) = _job(alice)
    _set_states(job, "Running", "Running")
    proxy = CuttableProxy(live_server.url)
    got: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    client = Client(proxy.url, token=issue_token(alice), username="alice")

    def follow():
        try:
            for line in client.logs("fol", follow=True, poll_interval=0.05, reconnect_for=60):
                got.append((line.replica, line.text))
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)
        finally:
            connection.close()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    expected = {"trainer-0": [], "trainer-1": []}

    def write(replica, n, tag):
        lines = [f"{tag} {i} " + "x" * (i % 50) for i in range(n)]
        logstore.append(replica, "".join(line + "\n" for line in lines).encode())
        expected[replica.name].extend(lines)

    for round_no in range(6):
        write(t0, 200, f"r{round_no}a")
        write(t1, 50, f"r{round_no}b")
        if round_no == 2:
            proxy.cut(refuse_for=5.0)  # longer than the HTTP layer's own retries
        elif round_no % 2:
            proxy.cut()
        wait_for(lambda: len(got) == sum(map(len, expected.values())) or errors)
    # a line written in two pieces arrives once, whole
    logstore.append(t0, b"half a ")
    wait_for(lambda: proxy.bytes_down > 0)
    time.sleep(0.2)
    logstore.append(t0, b"line\n")
    expected["trainer-0"].append("half a line")
    logstore.append(t1, b"last words\n")
    expected["trainer-1"].append("last words")
    _set_states(job, "Succeeded", "Succeeded")
    thread.join(60)
    proxy.close()
    client.close()
    assert not thread.is_alive(), "the follower did not stop when the job ended"
    assert not errors, errors
    for name, lines in expected.items():
        assert [text for who, text in got if who == name] == lines
    assert proxy.cuts >= 4


def test_cli_follow_waits_while_pending_and_stops_at_the_end(config, alice):
    from jobs.live import logstore
    from paddlectl.cli.main import main

    job, (t0, t1) = _job(alice, "pend")
    out, err = io.StringIO(), io.StringIO()
    problems: list[BaseException] = []

    def lifecycle():
        # Each step waits for the follower to have shown the one before (an event, not a window
        # it must hit on a busy machine): pending, then the first lines, then the end.
        try:
            wait_for(lambda: "job pend Queued" in err.getvalue(), what=lambda: f"Queued in {err.getvalue()!r}")
            _set_states(job, "Running", "Running")
            logstore.append(t0, b"started 0\n")
            logstore.append(t1, b"started 1\n")
            wait_for(lambda: "[trainer-0] started 0" in out.getvalue() and "[trainer-1] started 1" in out.getvalue(),
                     what=lambda: f"the first lines in {out.getvalue()!r}")
            logstore.append(t0, b"done 0\n")
        except BaseException as e:  # noqa: BLE001 - surfaced below; the job ends all the same so the follower returns
            problems.append(e)
        finally:
            _set_states(job, "Succeeded", "Succeeded")
            connection.close()

    thread = threading.Thread(target=lifecycle, daemon=True)
    thread.start()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["logs", "-f", "pend"])
    thread.join(10)
    res = Result(code, out.getvalue(), err.getvalue())
    assert not problems, problems
    assert res.code == 0, res.err
    assert sorted(res.lines) == ["[trainer-0] done 0", "[trainer-0] started 0", "[trainer-1] started 1"]
    assert res.lines.index("[trainer-0] started 0") < res.lines.index("[trainer-0] done 0")
    states = re.findall(r"^\[paddlectl\] job pend (\w+)", res.err, re.MULTILINE)
    # State changes go to stderr; it waited while queued and stopped only once it saw the end.
    assert states[0] == "Queued" and states[-1] == "Succeeded", res.err


def test_cli_follows_the_build_from_its_start_and_stops_when_the_job_starts(config, alice):
    from jobs.live import logstore

    job, _ = _job(alice, "bld")

    def lifecycle():
        try:
            time.sleep(1.0)
            _set_states(job, "Building", "Pending")
            logstore.append_build(job, b"Collecting numpy\n")
            time.sleep(1.0)
            logstore.append_build(job, b"Successfully installed numpy\n")
            _set_states(job, "Starting", "Pending")  # the replicas are still starting: no wait for them
        finally:
            connection.close()

    thread = threading.Thread(target=lifecycle, daemon=True)
    thread.start()
    res = run_cli("logs", "-f", "-w", "build", "bld")
    thread.join(10)
    assert res.code == 0, res.err
    assert res.lines == ["Collecting numpy", "Successfully installed numpy"]
    assert run_cli("logs", "-w", "build", "bld").lines == ["Collecting numpy", "Successfully installed numpy"]
    assert run_cli("logs", "-w", "bld-build", "bld").lines == ["Collecting numpy", "Successfully installed numpy"]


def test_follow_of_an_ended_job_prints_everything_and_returns(config, alice):
    from jobs.live import logstore

    job, (t0,) = _job(alice, "ended", trainers=1)
    logstore.append(t0, b"".join(b"line %d\n" % i for i in range(3000)))
    _set_states(job, "Failed", "Failed")
    res = run_cli("logs", "-f", "ended")
    assert res.code == 0
    assert res.lines == [f"line {i}" for i in range(3000)]
    res = run_cli("logs", "-n", "2", "-f", "ended")
    assert res.lines == ["line 2998", "line 2999"]


def test_sdk_wait_kill_delete_list(client, alice):
    from jobs.models import Job

    job, _ = _job(alice, "sdk")
    assert [j["name"] for j in client.list()] == ["sdk"]
    assert [j["name"] for j in client.list(all=False)] == ["sdk"]
    assert client.get("sdk")["state"] == "Queued"
    assert [w["name"] for w in client.workers("sdk")] == ["trainer-0", "trainer-1"]
    with pytest.raises(TimeoutError):
        client.wait("sdk", timeout=0.3, interval=0.1)
    threading.Timer(0.3, lambda: (Job.objects.filter(pk=job.pk).update(state="Running"), connection.close())).start()
    assert client.wait("sdk", "Running", timeout=10, interval=0.1)["state"] == "Running"
    assert client.kill("sdk")["state"] == "Killed"
    assert client.wait("sdk", timeout=5)["state"] == "Killed"
    assert client.list(all=False) == []
    client.delete("sdk")
    assert client.list() == []
    from paddlectl import NotFound

    with pytest.raises(NotFound):
        client.get("sdk")


def test_follow_reads_when_the_server_pushes_instead_of_waiting_for_the_next_poll(alice):
    from tests.support import LiveASGI

    from accounts.services import issue_token
    from jobs.live import logstore, notify
    from paddlectl import Client

    job, (t0, t1) = _job(alice, "push")
    _set_states(job, "Running", "Running")
    logstore.append(t0, b"first\n")
    got: list[str] = []
    ended = threading.Event()
    with LiveASGI() as live:  # HTTP and websockets, as `make run` serves them
        client = Client(live.url, token=issue_token(alice), username="alice")

        def follow():
            try:
                for line in client.logs("push", follow=True, poll_interval=300):
                    got.append(line.text)
            finally:
                ended.set()

        threading.Thread(target=follow, daemon=True).start()
        wait_for(lambda: got == ["first"])
        logstore.append(t1, b"second\n")
        notify.log_data(job.pk, "trainer-1", 0, "second\n", 7)
        wait_for(lambda: got == ["first", "second"], timeout=20)  # long before a poll would come
        _set_states(job, "Succeeded", "Succeeded")
        notify.job_changed(job.pk)
        assert ended.wait(20)
    assert got == ["first", "second"]


def test_follow_prints_pushed_output_that_continues_its_offset_and_reads_over_a_gap(alice):
    from tests.support import LiveASGI

    from accounts.services import issue_token
    from jobs.live import logstore, notify
    from paddlectl import Client

    job, (t0, _) = _job(alice, "pushed")
    _set_states(job, "Running", "Running")
    logstore.append(t0, b"first\n")
    got: list[str] = []
    with LiveASGI() as live:
        client = Client(live.url, token=issue_token(alice), username="alice")

        def follow():
            for line in client.logs("pushed", replica="trainer-0", follow=True, poll_interval=300):
                got.append(line.text)

        threading.Thread(target=follow, daemon=True).start()
        wait_for(lambda: got == ["first"])
        # Only pushed, not in the file: printed from the push itself, no read.
        notify.log_data(job.pk, "trainer-0", 6, "pushed\n", 13)
        wait_for(lambda: got == ["first", "pushed"], timeout=20)
        # A push that skips bytes is not printed: the file is read from the offset reached.
        logstore.append(t0, b"pushedXfrom the file\n")
        notify.log_data(job.pk, "trainer-0", 20, "not continuing\n", 35)
        wait_for(lambda: got == ["first", "pushed", "from the file"], timeout=20)
    assert got == ["first", "pushed", "from the file"]


def test_wait_returns_when_the_server_pushes_the_change(alice):
    from tests.support import LiveASGI

    from accounts.services import issue_token
    from jobs.live import notify
    from paddlectl import Client

    job, _ = _job(alice, "waited")
    _set_states(job, "Running", "Running")
    result: list[dict] = []
    with LiveASGI() as live:
        client = Client(live.url, token=issue_token(alice), username="alice")
        thread = threading.Thread(target=lambda: result.append(client.wait("waited", interval=300)), daemon=True)
        thread.start()
        time.sleep(1)  # it has read "Running" and is waiting
        _set_states(job, "Succeeded", "Succeeded")
        notify.job_changed(job.pk)
        thread.join(20)
    assert result and result[0]["state"] == "Succeeded"
