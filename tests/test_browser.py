"""In a real browser (Debian's Chromium driven by Playwright): log in, submit examples/fit_a_line
from the form with 2 pservers + 2 trainers, watch it reach Succeeded, read the logs and see the
loss curve. `.ci/run` installs Chromium; without it these tests are skipped."""

import re
from pathlib import Path

import pytest

from jobs.models import Job
from pfs.paths import home
from tests.support import job_processes, needs_chromium, wait_for

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fit_a_line"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    needs_chromium,
]


def fill_job(page, name):
    page.fill("#id_name", name)
    page.fill("#id_entry", "python train.py")
    page.fill("#id_trainers", "2")
    page.fill("#id_pservers", "2")
    page.fill("#id_passes", "10")
    files = ("train.py", "checkpoint.py", "requirements.txt")
    page.set_input_files("#id_files", [str(EXAMPLE / name) for name in files])


def test_submit_fit_a_line_from_the_form_and_watch_it_succeed(system, page, live_server, alice, settings):
    from playwright.sync_api import expect

    page.goto(f"{live_server.url}/jobs/new/")
    fill_job(page, "fit-a-line")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/fit-a-line/")

    # Any end, so a failed job fails the test at once with its reason rather than at the timeout.
    page.locator(".jobstate .state", has_text=re.compile("Succeeded|Failed|Killed")).wait_for(timeout=600_000)
    job = Job.objects.get(name="fit-a-line")
    assert job.state == "Succeeded", (job.state, job.message[-2000:])
    # the page keeps refreshing until the pservers, stopped after the trainers' success, have ended
    expect(page.locator("#status tbody .state.stopped")).to_have_count(2, timeout=30_000)
    rows = page.locator("#status table.grid tbody tr")
    states = {rows.nth(i).locator("td").nth(0).inner_text(): rows.nth(i).locator("td").nth(1).inner_text()
              for i in range(rows.count())}
    assert states == {"pserver-0": "Terminated", "pserver-1": "Terminated",
                      "trainer-0": "Succeeded", "trainer-1": "Succeeded"}
    page.click(".tabs a:has-text('trainer-1')")
    page.locator("pre.log", has_text="pass 10 loss").wait_for()
    page.locator("#chart canvas").first.wait_for()  # the loss curve drew
    shots = settings.VAR_DIR / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "job-detail.png"), full_page=True)

    assert any(home(alice, "local").child("models", "fit-a-line").disk.rglob("*.pdiparams"))
    wait_for(lambda: not job_processes(job), 30, what="no process left")


def test_a_bad_submission_shows_the_error_beside_the_field(page, live_server):
    page.goto(f"{live_server.url}/jobs/new/")
    fill_job(page, "fit_a_line")
    page.fill("#id_memory", "lots")
    page.click("button[type=submit]")
    assert "no '_'" in page.locator("#field-name .error").inner_text()
    assert "not a memory amount" in page.locator("#field-memory .error").inner_text()
    assert not Job.objects.exists()


def test_pservers_follow_the_modes_default_until_the_user_sets_them(page, live_server):
    page.goto(f"{live_server.url}/jobs/new/")
    assert page.input_value("#id_pservers") == "1"  # the spec's default in ps mode
    page.select_option("#id_mode", "collective")
    assert page.input_value("#id_pservers") == "0"
    page.select_option("#id_mode", "ps")
    assert page.input_value("#id_pservers") == "1"
    page.fill("#id_pservers", "3")
    page.select_option("#id_mode", "collective")
    assert page.input_value("#id_pservers") == "3"  # the user's own value stays
