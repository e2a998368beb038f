"""Logs beyond the panel's last lines: the whole log searched on the server with line numbers, all
logs merged in the order they were written, and a failure's traceback kept over the shutdown noise."""

import os
import tracemalloc

import pytest

from jobs import logs, services
from jobs.lifecycle import restarts
from jobs.live import failures, logstore
from jobs.models import Job
from tests.support import make_package, token_client

pytestmark = pytest.mark.django_db

MiB = 1 << 20


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "mode": "ps",
                                      "pservers": 1, "trainers": 1})
    Job.objects.filter(pk=job.pk).update(state="Running")
    return job


def test_the_whole_log_is_searched_on_the_server_with_line_numbers(alice, job, monkeypatch):
    trainer = job.replicas.get(role="trainer")
    logstore.append(trainer, b"".join(b"step %d loss 0.5\n" % i for i in range(1, 5001)))
    logstore.append(trainer, b"NaN detected in layer fc_0\n")
    api = token_client(alice)
    [found] = api.get("/api/v2/jobs/fit/logs/", {"replica": "trainer-0", "q": "step 1 "}).json()
    assert [(m["line"], m["text"]) for m in found["matches"]] == [(1, "step 1 loss 0.5")]
    [found] = api.get("/api/v2/jobs/fit/logs/", {"replica": "trainer-0", "q": "nan DETECTED"}).json()
    [match] = found["matches"]
    assert match["line"] == 5001 and match["text"] == "NaN detected in layer fc_0" and not found["truncated"]
    assert logstore.read(trainer, match["offset"]).text.startswith("NaN detected")  # read on from it
    monkeypatch.setattr(logs, "MAX_MATCHES", 3)
    [found] = api.get("/api/v2/jobs/fit/logs/", {"replica": "trainer-0", "q": "loss"}).json()
    assert [m["line"] for m in found["matches"]] == [1, 2, 3] and found["truncated"]
    everywhere = api.get("/api/v2/jobs/fit/logs/", {"q": "NaN"}).json()
    assert {e["replica"]: len(e["matches"]) for e in everywhere} == {"pserver-0": 0, "trainer-0": 1}
    assert "matches" not in api.get("/api/v2/jobs/fit/logs/", {"q": ""}).json()[0]  # no text: no search
    assert api.get("/api/v2/jobs/fit/logs/", {"q": "x" * 201}).status_code == 400


def test_the_page_searches_the_whole_log(client, alice, job):
    trainer = job.replicas.get(role="trainer")
    logstore.append(trainer, b"warning: early\n" + b"".join(b"line %d\n" % i for i in range(1000)))
    client.force_login(alice)
    assert "warning: early" not in client.get("/jobs/fit/logs/trainer-0/").content.decode()  # the panel's last 300
    found = client.get("/jobs/fit/logs/trainer-0/search/", {"q": "WARNING"}).content.decode()
    assert "<strong>1</strong> line of the whole trainer-0 log holds" in found
    assert '<span class="n">1</span>  warning: early' in found


def test_all_logs_merge_in_the_order_they_were_written(alice, job, client):
    pserver, trainer = job.replicas.get(role="pserver"), job.replicas.get(role="trainer")
    # As the watcher's follower records them: each log's bytes up to an offset seen at a time.
    logstore.append(pserver, b"pserver listening\n")
    logstore.mark_time(pserver, 18, 1000.0)
    logstore.append(trainer, b"trainer connecting\n")
    logstore.mark_time(trainer, 19, 1001.0)
    logstore.append(pserver, b"pserver got a trainer\n")
    logstore.mark_time(pserver, 18 + 22, 1002.0)
    logstore.append(trainer, b"trainer pass 1\ntrainer pass 2\n")
    logstore.mark_time(trainer, 19 + 30, 1003.0)
    lines = token_client(alice).get("/api/v2/jobs/fit/logs/merged/", {"lines": 10}).json()
    assert [(line["replica"], line["text"]) for line in lines] == [
        ("pserver-0", "pserver listening"), ("trainer-0", "trainer connecting"),
        ("pserver-0", "pserver got a trainer"), ("trainer-0", "trainer pass 1"), ("trainer-0", "trainer pass 2")]
    assert lines[0]["time"].startswith("1970-01-01T00:16:40")
    assert [line.text for line in logs.merged(job, 2)] == ["trainer pass 1", "trainer pass 2"]
    client.force_login(alice)
    panel = client.get("/jobs/fit/logs/all/").content.decode()
    assert '<span class="r r-pserver-0">[pserver-0]</span> pserver got a trainer' in panel


TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 40, in <module>
    main()
  File "train.py", line 31, in main
    exe.run(program)
ValueError: In user code:

    InvalidArgumentError: The shape of input x is [32, 13], expected [-1, 12].
      [Hint: Expected x_dims[1] == 12, but received x_dims[1]:13 != 12:12.]
      [operator < fc > error]
"""
GLOG = "".join(f"I0501 10:00:{i:02d}.123456  4242 server.cc:{i}] brpc shutting down channel {i}\n"
               for i in range(60))


def test_a_failure_keeps_its_traceback_not_the_shutdown_lines_after_it(job):
    text = "pass 1 loss 0.4\n" + TRACEBACK + GLOG
    shown = failures.excerpt(text, 20)
    assert shown == TRACEBACK.rstrip("\n")
    trainer = job.replicas.get(role="trainer")
    logstore.append(trainer, text.encode())
    message = restarts.failure_message(trainer)
    assert "InvalidArgumentError" in message and "[operator < fc > error]" in message and "brpc" not in message


def test_without_a_traceback_the_last_lines_that_are_not_routine_are_kept():
    text = "pass 1\nSegmentation fault (core dumped)\n" + GLOG + "E0501 10:01:00.1  42 x.cc:1] fatal: bad alloc\n"
    assert failures.excerpt(text, 3) == "pass 1\nSegmentation fault (core dumped)\nE0501 10:01:00.1  42 x.cc:1] " \
                                        "fatal: bad alloc"


def test_a_long_traceback_keeps_its_header_and_its_innermost_frames():
    frames = "".join(f'  File "m{i}.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(30))
    shown = failures.excerpt("Traceback (most recent call last):\n" + frames + "RecursionError: too deep\n", 10)
    lines = shown.split("\n")
    assert len(lines) == 10 and lines[0].startswith("Traceback") and "left out" in lines[1]
    assert lines[-1] == "RecursionError: too deep" and lines[-2] == "    f30()"


def peak_bytes(fn):
    """The most memory `fn` held at once (what Python allocated), and what it returned."""
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def sparse_line(replica, size: int) -> None:
    """What a job's `os.ftruncate(1, size)` makes of its log: one line of NULs, no disk used."""
    logstore.append(replica, b"")
    os.truncate(logstore.path(replica), size)


def test_a_failure_reads_a_bounded_end_of_a_log_without_newlines(job):
    # restarts.failure_message runs in the watch loop every job shares.
    trainer = job.replicas.get(role="trainer")
    sparse_line(trainer, 24 * MiB)
    logstore.append(trainer, b"\n" + TRACEBACK.encode())
    peak, message = peak_bytes(lambda: restarts.failure_message(trainer))
    assert peak < 16 * MiB and "InvalidArgumentError" in message
    peak, chunk = peak_bytes(lambda: logstore.tail(trainer, 100))
    assert peak < 12 * MiB  # what is read (a few MiB), and the text made of it
    assert chunk.text.startswith("\0") and chunk.next_offset - chunk.offset <= 4 * MiB


def test_the_tail_of_a_log_spans_the_blocks_it_reads(job):
    trainer = job.replicas.get(role="trainer")
    end = logstore.append(trainer, b"".join(b"line %05d\n" % i for i in range(20_000)))  # 4 blocks
    chunk = logstore.tail(trainer, 10_000)
    assert chunk.text == "".join(f"line {i:05d}\n" for i in range(10_000, 20_000))
    assert (chunk.offset, chunk.next_offset) == (end - 11 * 10_000, end)


def test_the_search_holds_a_bounded_part_of_a_line_without_newline(job):
    trainer = job.replicas.get(role="trainer")
    sparse_line(trainer, 32 * MiB)
    logstore.append(trainer, b"\nError: the end\n")
    peak, (matches, more) = peak_bytes(lambda: logstore.search(trainer, "error"))
    assert peak < 8 * MiB
    assert [(m.line, m.offset, m.text) for m in matches] == [(2, 32 * MiB + 1, "Error: the end")] and not more


def test_the_search_finds_lines_after_an_over_long_one_at_their_offsets(job):
    trainer = job.replicas.get(role="trainer")
    long = b"x" * (2 << 20) + b" error far in\n"  # past what is searched of it, read past in pieces
    logstore.append(trainer, b"error 1\n" + long + b"error 2\n" + b"y" * (1 << 16) + b"\nerror 3")
    matches, _ = logstore.search(trainer, "ERROR")
    assert [(m.line, m.text) for m in matches] == [(1, "error 1"), (3, "error 2"), (5, "error 3")]
    for m in matches:
        assert logstore.read(trainer, m.offset).text.startswith(m.text)
