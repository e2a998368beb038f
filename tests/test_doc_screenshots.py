"""The pictures in README.md and the docs (docs/images/): the job page, the runs table and the
cluster page, taken in Debian's Chromium from data laid out as a small sweep would leave it. Kept
as test artifacts on every run; DOC_IMAGES=1 also writes them into docs/images/ (then commit)."""

import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from core import health
from jobs import services
from jobs.live import logstore, usage
from jobs.models import Job, JobEvent, ReplicaState
from tests.screens import screenshot
from tests.support import LiveASGI, logged_in_browser, make_package, needs_chromium

pytestmark = [pytest.mark.timeout(180), needs_chromium]
DOC_IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"


@pytest.fixture
def service_alive(redis_server):
    """The worker and the watcher beat, as under `make run`, so no warning banner covers the page:
    for as long as the test takes (one beat lasts HEARTBEAT_TTL, which a busy machine outruns)."""
    beats = [health.Heartbeat(role, "docs") for role in ("worker", "watcher")]
    for beat in beats:
        health.beat(beat.role, beat.host)  # before the thread's first, so the page never misses it
        beat.start()
    yield
    for beat in beats:
        beat.stop()  # and forgets


def losses(scale, passes, noise_seed):
    out, value = [], 573.0 * scale
    for i in range(passes):
        value = value * 0.62 + 2.0 + ((i * 7919 + noise_seed) % 13) / 13.0
        out.append(round(value, 3))
    return out


def sweep_job(user, name, lr, passes_done, state, started_ago, scale=1.0, seed=0):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "ps",
                                     "pservers": 2, "trainers": 2, "passes": 20, "cpu": "1", "memory": "2Gi",
                                     "env": {"LR": str(lr), "BATCH": "64"}})
    now = time.time()
    start = now - started_ago
    for replica in job.replicas.all():
        if replica.role == "trainer":
            lines = []
            for i, v in enumerate(losses(scale, passes_done, seed + replica.index)):
                point = {"step": i + 1, "loss": v, "acc": round(1 - v / 700, 4), "wall": round(start + 30 * i, 3)}
                lines.append(f"trainer {replica.index} pass {i + 1} loss {v:.4f}\n"
                             f"PADDLECLOUD_METRIC {json.dumps(point)}\n")
            logstore.append(replica, ("loading dataset uci_housing (13 features)\n" + "".join(lines)).encode())
        else:
            logstore.append(replica, f"pserver {replica.index} listening on 10.0.0.{replica.index + 2}:6174\n".encode())
    Job.objects.filter(pk=job.pk).update(state=state)
    return job


def lay_out_events(job, phases):
    JobEvent.objects.filter(job=job).delete()
    at = timezone.now() - sum((d for _, _, _, d in phases), timedelta(0))
    for state, reason, message, spent in phases:
        JobEvent.objects.filter(pk=JobEvent.objects.create(job=job, state=state, reason=reason,
                                                           message=message).pk).update(created=at)
        at += spent


@pytest.fixture
def sweep(alice, bob, datacenter, service_alive):
    datacenter.capacity_cpu_millicores, datacenter.capacity_memory_bytes = 16000, 64 * 2**30
    datacenter.save()
    main = sweep_job(alice, "fit-lr-0.01", 0.01, 12, "Running", 400, seed=1)
    lay_out_events(main, [("Queued", "Submitted", "2 pservers, 2 trainers", timedelta(seconds=1)),
                          ("Building", "Admitted", "preparing the runtime", timedelta(seconds=74)),
                          ("Starting", "Launching", "starting the replicas", timedelta(seconds=3)),
                          ("Running", "Running", "every replica is running", timedelta(seconds=360))])
    now = timezone.now()
    Job.objects.filter(pk=main.pk).update(started=now - timedelta(seconds=360), reason="Running")
    for i, replica in enumerate(main.replicas.order_by("role", "index")):
        replica.state, replica.host, replica.port = ReplicaState.RUNNING, "127.0.0.1", 36001 + i
        replica.pod, replica.started = str(4210 + i), now - timedelta(seconds=360)
        replica.save()
    logstore.append_build(main, b"Collecting paddlepaddle==2.6.2\nSuccessfully installed paddlepaddle-2.6.2\n")
    t0 = datetime.now(UTC) - timedelta(minutes=6)
    for k in range(0, 72):
        usage.record(main, {(r.role, r.index): usage.Usage(memory_bytes=(300 + 40 * r.index + k) * 2**20,
                                                            cpu_percent=60.0 + (k * 37 + 11 * r.index) % 35)
                            for r in main.replicas.all()}, now=t0 + timedelta(seconds=5 * k))
    sweep_job(alice, "fit-lr-0.1", 0.1, 20, "Succeeded", 900, scale=1.4, seed=3)
    sweep_job(alice, "fit-lr-0.001", 0.001, 20, "Succeeded", 1500, scale=0.8, seed=5)
    sweep_job(alice, "fit-lr-0.03", 0.03, 7, "Running", 220, scale=1.1, seed=7)
    other = sweep_job(bob, "bobs-private-run", 0.1, 0, "Queued", 60)
    Job.objects.filter(pk=other.pk).update(queue_position=1, reason="NoCapacity",
                                           message="needs 8 CPU, 4 free in datacenter local")
    return main


def keep(path: Path) -> None:
    if os.environ.get("DOC_IMAGES") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOC_IMAGES / path.name)


def test_the_pictures_in_the_docs(transactional_db, sweep, monkeypatch):
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:  # websockets too, as make run
        take(page, server.url)


def take(page, base: str) -> None:
    page.set_viewport_size({"width": 1100, "height": 1250})
    page.goto(f"{base}/jobs/fit-lr-0.01/")
    page.wait_for_function("document.body.dataset.live === 'open'")
    page.locator("#chart canvas").first.wait_for()
    page.locator("#usage-chart canvas").first.wait_for()
    expect(page.locator("#log pre.log")).to_contain_text("pass 12 loss")
    expect(page.locator(".flash.error")).to_have_count(0)
    keep(screenshot(page, "job-page", full_page=False))
    page.set_viewport_size({"width": 1100, "height": 520})
    page.goto(f"{base}/runs/?order=loss")
    expect(page.locator("table.runs tbody tr")).to_have_count(4)
    keep(screenshot(page, "runs-table", full_page=False))
    page.set_viewport_size({"width": 1100, "height": 620})
    page.goto(f"{base}/cluster/")
    expect(page.locator("table.cluster-jobs").nth(1).locator("tbody tr")).to_have_count(1)
    keep(screenshot(page, "cluster-page", full_page=False))
