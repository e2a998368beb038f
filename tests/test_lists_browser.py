"""The job list and the cluster page in Debian's Chromium: ticked jobs survive the list's refresh
and are killed together; both pages fit a 390 px phone; screenshots kept as artifacts."""

import pytest
from playwright.sync_api import expect

from jobs import services
from jobs.live import logstore
from jobs.models import Job, JobState
from tests.screens import screenshot
from tests.support import make_package, needs_chromium

pytestmark = [pytest.mark.timeout(180), needs_chromium]


def submit(user, name, state, **fields):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective",
                                     "trainers": 2, "passes": 20, **fields})
    Job.objects.filter(pk=job.pk).update(state=state)
    return job


@pytest.fixture
def jobs(alice, bob, datacenter):
    datacenter.capacity_cpu_millicores, datacenter.capacity_memory_bytes = 8000, 32 * 2**30
    datacenter.save()
    made = [submit(alice, "resnet-lr-0.1", JobState.RUNNING, cpu="2", memory="4Gi"),
            submit(alice, "resnet-lr-0.01", JobState.RUNNING, cpu="1", memory="2Gi"),
            submit(alice, "bert-base", JobState.SUCCEEDED)]
    for job, done in zip(made[:2], (12, 7), strict=True):
        for replica in job.replicas.all():
            logstore.append(replica, b"".join(b'PADDLECLOUD_METRIC {"step": %d, "loss": 0.5}\n' % i
                                              for i in range(1, done + 1)))
    Job.objects.filter(pk=made[1].pk).update(restarts=1)
    big = submit(bob, "bobs-private-run", JobState.QUEUED, cpu="4", memory="16Gi")
    Job.objects.filter(pk=big.pk).update(queue_position=1, reason="NoCapacity",
                                         message="needs 8 CPU, 2 free in datacenter local")
    submit(alice, "resnet-lr-1.0", JobState.QUEUED)
    Job.objects.filter(name="resnet-lr-1.0").update(queue_position=2, reason="Waiting",
                                                    message="behind #1 (it keeps its place)")
    return made


def test_ticked_jobs_stay_ticked_across_refreshes_and_are_killed_together(page, live_server, jobs):
    page.goto(f"{live_server.url}/jobs/")
    expect(page.locator("tr:has-text('resnet-lr-0.01') td.progress")).to_contain_text("7/20")
    screenshot(page, "job-list", full_page=False)
    for name in ("resnet-lr-0.1", "resnet-lr-0.01"):
        page.check(f"input[aria-label='Select {name}']")
    expect(page.locator("#bulk-count")).to_have_text("2")
    page.evaluate("""() => new Promise((done) =>
        document.body.addEventListener("htmx:afterSwap", done, { once: true }))""")  # the rows' next refresh
    expect(page.locator("input[aria-label='Select resnet-lr-0.1']")).to_be_checked()
    expect(page.locator("input[aria-label='Select bert-base']")).not_to_be_checked()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(".bulk-actions button[value=kill]")
    expect(page.locator(".flash.success")).to_contain_text("Killing resnet-lr-0.01, resnet-lr-0.1.")
    assert set(Job.objects.filter(state="Killed").values_list("name", flat=True)) == {"resnet-lr-0.1",
                                                                                     "resnet-lr-0.01"}


@pytest.mark.parametrize("width", [1280, 390])
def test_the_cluster_page_shows_use_and_the_queue_and_fits_a_phone(page, live_server, jobs, width):
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/cluster/")
    section = page.locator("section.datacenter[data-datacenter=local]")
    expect(section.locator(".meter[data-resource=cpu] .figures")).to_have_text("6 of 8 held")
    queue = section.locator("table.cluster-jobs").nth(1)
    expect(queue.locator("tbody tr")).to_have_count(2)
    expect(queue.locator("tbody tr").first).to_contain_text("bob")
    expect(page.locator("body")).not_to_contain_text("bobs-private-run")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"cluster-{width}", full_page=width == 1280)


def test_the_job_list_fits_a_390_px_phone(page, live_server, jobs):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/jobs/")
    expect(page.locator("table.jobs tbody tr")).to_have_count(4)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "job-list-390", full_page=False)
