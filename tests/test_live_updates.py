"""The job page's live updates in a real browser against uvicorn (as in the Procfile): the page's
websocket receives the watcher's pushes of new log output and state changes, and shows them."""

import json

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from jobs import services
from pfs.services import home_of
from tests.support import LiveASGI, logged_in_browser, make_package, needs_chromium, running_system

pytestmark = [pytest.mark.timeout(420), needs_chromium]

# The second line waits for the test's signal (a file in the home), written once the page's websocket is
# open: on a busy machine the browser can take longer to start than any fixed sleep in the job.
PROGRAM = """import os, time
print('first line', flush=True)
go = os.path.join(os.environ['PADDLE_PFS_HOME'], 'go')
deadline = time.monotonic() + 240
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
print('second line', flush=True)
time.sleep(1)
"""


def test_the_job_page_shows_pushed_logs_and_state(system, alice, monkeypatch):
    pkg = make_package(alice, "live", {"train.py": PROGRAM})
    job = services.submit_job(alice, {"name": "live", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})
    frames = []
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(json.loads(payload))))
        try:
            page.goto(f"{server.url}/jobs/{job.name}/", timeout=60_000)
            page.wait_for_function("document.body.dataset.live === 'open'", timeout=60_000)
            (home_of(alice, "local").disk / "go").touch()
            # the replica may start well after the page, on a busy machine
            page.locator("pre.log", has_text="second line").wait_for(timeout=180_000)
            page.locator(".jobstate .state", has_text="Succeeded").wait_for(timeout=60_000)
        except PlaywrightTimeout:
            job.refresh_from_db()
            replicas = [(r.name, r.state, r.message) for r in job.replicas.all()]
            raise AssertionError(f"job {job.state} ({job.message!r}), replicas {replicas}, websocket frames {frames}, "
                                 f"page says live={page.evaluate('document.body.dataset.live')}") from None

    pushed = "".join(f["text"] for f in frames if f["type"] == "log" and f["replica"] == "trainer-0")
    assert "second line" in pushed, json.dumps(frames)  # delivered through the websocket, not only by polling
    assert any(f["type"] == "job" and f["state"] == "Succeeded" for f in frames), json.dumps(frames)


@pytest.mark.django_db(transaction=True)
def test_a_page_opened_while_the_job_waits_shows_trainer_0s_log_once_it_runs(alice, monkeypatch):
    """The page opens on the build's log while the job waits; when the job starts, the tab the
    page would open now (trainer-0's) is shown, and its lines arrive live. A tab the user chose
    stays chosen."""
    pkg = make_package(alice, "waits", {"train.py": PROGRAM})
    job = services.submit_job(alice, {"name": "waits", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})
    current = ".tabs a.current"
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.goto(f"{server.url}/jobs/{job.name}/", timeout=60_000)
        page.wait_for_function("document.body.dataset.live === 'open'", timeout=60_000)
        assert page.locator(current).inner_text() == "build"  # nothing runs it yet
        with running_system():
            page.locator(current, has_text="trainer-0").wait_for(timeout=180_000)
            page.locator("pre.log[data-replica='trainer-0']", has_text="first line").wait_for(timeout=60_000)
            page.locator(".tabs a", has_text="build").click()  # the user's choice, kept from now on
            page.locator("pre.log[data-replica='build']").wait_for(timeout=60_000)
            (home_of(alice, "local").disk / "go").touch()
            page.locator(".jobstate .state", has_text="Succeeded").wait_for(timeout=120_000)
            page.wait_for_load_state("networkidle")
        assert page.locator(current).inner_text() == "build"
