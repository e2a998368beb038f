"""The runs table and overlay: parameters and final/best metrics per run, sorted by a metric;
up to ten runs on one chart; each point's wall time for the chart's time axes."""

import json
import tracemalloc
from collections.abc import Callable

import pytest

from jobs import runs, services
from jobs.live import logstore, metrics
from jobs.models import Job
from tests.support import make_package

pytestmark = pytest.mark.django_db


def run(user, name, losses, accs=None, **fields):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective",
                                     "trainers": 1, **fields})
    lines = []
    for i, loss in enumerate(losses, 1):
        extra = f', "acc": {accs[i - 1]}' if accs else ""
        lines.append(f'PADDLECLOUD_METRIC {{"step": {i}, "loss": {loss}{extra}}}\n')
    logstore.append(job.replicas.get(), "".join(lines).encode())
    return job


@pytest.fixture
def sweep(alice):
    run(alice, "lr-0.1", [573.0, 40.0, 9.5, 11.0], [0.1, 0.5, 0.7, 0.65], env={"LR": "0.1"}, passes=4)
    run(alice, "lr-0.01", [573.0, 200.0, 90.0, 4.3], [0.1, 0.2, 0.4, 0.8], env={"LR": "0.01"}, passes=4)
    run(alice, "no-metrics", [])


def test_the_table_shows_parameters_and_final_and_best_metrics(client, alice, sweep):
    client.force_login(alice)
    res = client.get("/runs/")
    page = res.content.decode()
    assert res.context["metrics"] == ["acc", "loss"]
    start = page.index('data-run="lr-0.1"')
    row = page[start:page.index("</tr>", start)]
    assert "<code>LR=0.1</code>" in row and "<code>python train.py</code>" in row
    # loss: lowest is best (9.5 at step 3); acc: highest (0.7 at step 3); final is the last line's
    assert "<strong>11</strong> · 9.5<span class=\"muted\"> @3</span>" in row
    assert "<strong>0.65</strong> · 0.7<span class=\"muted\"> @3</span>" in row


def test_runs_sort_by_a_metric_best_first_and_runs_without_it_last(client, alice, sweep):
    client.force_login(alice)
    order = lambda key: [r.job.name for r in client.get("/runs/", {"order": key}).context["rows"]]  # noqa: E731
    assert order("loss") == ["lr-0.01", "lr-0.1", "no-metrics"]  # 4.3 before 11
    assert order("-loss") == ["lr-0.1", "lr-0.01", "no-metrics"]
    assert order("acc") == ["lr-0.01", "lr-0.1", "no-metrics"]  # 0.8 before 0.65: higher is better
    page = client.get("/runs/", {"order": "loss", "name": "lr"}).content.decode()
    assert "?order=-loss&amp;name=lr" in page or "?name=lr&amp;order=-loss" in page  # the header flips it


def test_up_to_ten_runs_overlay_and_never_another_users(client, alice, bob, sweep):
    client.force_login(alice)
    res = client.get("/runs/compare/", {"job": ["lr-0.1", "lr-0.01", "", "lr-0.1"]})
    assert res.status_code == 200
    assert res.context["series"] == [["lr-0.1", "/jobs/lr-0.1/metrics/"], ["lr-0.01", "/jobs/lr-0.01/metrics/"]]
    run(bob, "bobs", [1.0])
    res = client.get("/runs/compare/", {"job": ["lr-0.1", "bobs", "nope"]})
    assert res.status_code == 400 and "no job named bobs, nope" in res.content.decode()
    for i in range(9):
        run(alice, f"r{i}", [1.0])
    ten = ["lr-0.1", *(f"r{i}" for i in range(9))]
    assert client.get("/runs/compare/", {"job": ten}).status_code == 200
    res = client.get("/runs/compare/", {"job": [*ten, "lr-0.01"]})
    assert res.status_code == 400 and f"at most {runs.MAX_OVERLAID} runs" in res.content.decode()


def test_each_point_has_its_wall_time_from_the_line_or_from_when_it_was_seen(alice):
    job = run(alice, "timed", [])
    replica = job.replicas.get()
    logstore.append(replica, b'PADDLECLOUD_METRIC {"step": 1, "loss": 2.0}\n')
    logstore.mark_time(replica, 44, 1000.5)  # the watcher saw those 44 bytes at 1000.5
    logstore.append(replica, b'PADDLECLOUD_METRIC {"step": 2, "loss": 1.0, "wall": 1002.25}\n')
    logstore.append(replica, b'PADDLECLOUD_METRIC {"step": 3, "loss": 0.5}\n')  # not seen yet
    series = metrics.replica_series(replica)
    assert series == {"wall": [1000.5, 1002.25, None], "loss": [2.0, 1.0, 0.5], "step": [1.0, 2.0, 3.0]}
    assert "wall" not in runs.summarize(series)


def test_the_metrics_json_gives_the_chart_every_key_and_the_wall_times(client, alice):
    job = run(alice, "fit", [3.0, 2.0])
    Job.objects.filter(pk=job.pk).update(state="Running")
    client.force_login(alice)
    series = client.get("/jobs/fit/metrics/").json()["replicas"]["trainer-0"]
    assert series["step"] == [1.0, 2.0] and series["loss"] == [3.0, 2.0] and series["wall"] == [None, None]


MiB = 1 << 20


def peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_line_without_newline_is_skipped_a_chunk_at_a_time_not_held_whole(alice):
    """A job can ftruncate its stdout (the log) to gigabytes of NULs: one line, no newline."""
    job = run(alice, "sparse", [])
    replica = job.replicas.get()
    first = b'PADDLECLOUD_METRIC {"step": 1, "loss": 0.5}\n'
    logstore.append(replica, first)
    with open(logstore.path(replica), "r+b") as f:
        f.truncate(32 * MiB)
    second = b'\nPADDLECLOUD_METRIC {"step": 2, "loss": 0.25}\n'
    logstore.append(replica, second)
    for offset, seen in ((len(first), 1000.0), (32 * MiB, 1500.0), (32 * MiB + len(second), 2000.0)):
        logstore.mark_time(replica, offset, seen)
    out = []
    assert peak_bytes(lambda: out.append(metrics.replica_series(replica))) < 8 * MiB
    # the skipped line's bytes still count: the second line's wall time is the mark past its offset
    assert out[0] == {"step": [1.0, 2.0], "loss": [0.5, 0.25], "wall": [1000.0, 2000.0]}


def test_a_replica_has_at_most_max_series_series_the_first_ones_seen(alice):
    job = run(alice, "many", [])
    replica = job.replicas.get()
    lines = 2000  # a new key on each: N series of N cells, were every key kept
    logstore.append(replica, b"".join(b'PADDLECLOUD_METRIC {"step": %d, "m%d": 1}\n' % (i, i) for i in range(lines)))
    series = metrics.replica_series(replica)
    assert sum(len(v) for v in series.values()) <= 100 * lines, f"{len(series)} series of {lines} cells"
    assert set(series) == {"step", "wall", *(f"m{i}" for i in range(metrics.MAX_SERIES))}
    assert series["m0"][:2] == [1.0, None] and len(series["step"]) == lines


def test_a_long_series_is_thinned_evenly_keeping_its_first_and_last_line(alice, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_POINTS", 4)
    job = run(alice, "long", [float(i) for i in range(1, 101)])
    series = metrics.replica_series(job.replicas.get())
    # every 16th line once thinned four times (at 8 lines kept), then the last
    assert series["step"] == [1.0, 17.0, 33.0, 49.0, 65.0, 81.0, 97.0, 100.0] == series["loss"]
    assert len(series["wall"]) == 8


def test_a_number_that_is_not_a_finite_float_is_dropped_from_a_metric_line(client, staff, alice):
    """JSON allows integers of any length (float() of one raises OverflowError) and Python's json
    reads NaN and Infinity, which JsonResponse would write out as invalid JSON."""
    huge = b"1" + b"0" * 400
    line = b'PADDLECLOUD_METRIC {"step": 1, "loss": %s, "a": NaN, "b": Infinity, "c": -Infinity, "d": 2}' % huge
    assert metrics.parse_line(line) == {"step": 1.0, "d": 2.0}
    assert metrics.parse_line(b'PADDLECLOUD_METRIC {"step": %s, "loss": 1}' % huge) is None  # step is required
    job = run(alice, "huge", [], passes=10)
    Job.objects.filter(pk=job.pk).update(state="Running")
    logstore.append(job.replicas.get(), line + b"\n")
    client.force_login(staff)
    assert client.get("/jobs/?owner=all").status_code == 200  # progress() reads every running job's last line
    client.force_login(alice)
    assert client.get("/jobs/huge/").status_code == 200
    body = client.get("/jobs/huge/metrics/").content
    assert json.loads(body, parse_constant=lambda c: pytest.fail(f"{c} in the JSON")) == {
        "replicas": {"trainer-0": {"step": [1.0], "d": [2.0], "wall": [None]}}}
