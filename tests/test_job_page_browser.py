"""The job page in a real browser (Debian's Chromium driven by Playwright): the first log tab,
searching the log, the layout on a 390 px phone, and the banner while the live connection is down."""

import contextlib
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from jobs import services
from jobs.live import logstore, notify
from jobs.models import Job, Replica, ReplicaState
from tests.screens import screenshot
from tests.support import LiveASGI, logged_in_browser, make_package, needs_chromium

pytestmark = [pytest.mark.timeout(180), needs_chromium]


def submit(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 2,
                                      "trainers": 2})
    Job.objects.filter(pk=job.pk).update(state="Running")  # built: the log panel opens on the training
    logstore.append(job.replicas.get(role="pserver", index=0), b"pserver output\n")
    logstore.append(job.replicas.get(role="trainer", index=0),
                    b"".join(b"trainer pass %d loss 0.5\n" % i for i in range(40)) + b"x" * 3000 + b"\n")
    return job


def test_the_log_panel_opens_on_trainer_0_and_finds_what_is_searched(page, live_server, alice):
    job = submit(alice)
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    expect(page.locator(".tabs a.current")).to_have_text("trainer-0")
    expect(page.locator("#log pre.log")).to_contain_text("trainer pass 39 loss")
    page.fill("#log-search", "PASS 3")  # case-insensitive: pass 3 and pass 30..39
    expect(page.locator("#log pre.log mark")).to_have_count(11)
    expect(page.locator("#log-matches")).to_have_text("11 matches")
    page.fill("#log-search", "")
    expect(page.locator("#log pre.log mark")).to_have_count(0)

    page.click(".tabs a:has-text('pserver-0')")
    expect(page.locator("#log pre.log")).to_have_text("pserver output\n")
    expect(page.locator("#log-download")).to_have_attribute("href", f"/jobs/{job.name}/logs/pserver-0/download/")


def test_a_log_answer_that_arrives_after_another_tab_was_chosen_is_not_shown(page, live_server, alice):
    job = submit(alice)
    held = []  # the page's first log request (trainer-0's), answered only after pserver-0's
    first = f"**/jobs/{job.name}/logs/trainer-0/"
    page.route(first, lambda route: held.append(route) if not held else route.continue_())
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    page.wait_for_function("document.querySelector('.tabs a') !== null")
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # Playwright dispatches the route to the handler while it waits
    page.click(".tabs a:has-text('pserver-0')")
    expect(page.locator("#log pre.log")).to_have_text("pserver output\n")
    with contextlib.suppress(PlaywrightError):  # the page may have aborted it already
        held[0].continue_()  # trainer-0's answer, late
    page.wait_for_load_state("networkidle")
    expect(page.locator("#log pre.log")).to_have_text("pserver output\n")
    expect(page.locator(".tabs a.current")).to_have_text("pserver-0")


def choose_pserver_then_answer(page, held: list) -> None:
    """Click the pserver-0 tab, then answer the held trainer-0 requests: the pserver's log stays."""
    page.click(".tabs a:has-text('pserver-0')")
    expect(page.locator("#log pre.log")).to_have_text("pserver output\n")
    for route in held:
        with contextlib.suppress(PlaywrightError):  # the page may have aborted it already
            route.continue_()
    page.wait_for_load_state("networkidle")
    expect(page.locator("#log pre.log")).to_have_text("pserver output\n")


def test_a_reload_for_the_jobs_state_that_answers_after_another_tab_was_chosen_is_not_shown(
        transactional_db, alice, monkeypatch):
    job = submit(alice)
    requests, held = [], []  # trainer-0's log requests; the ones after the first, answered late

    def hold(route):
        requests.append(route)
        if len(requests) == 1:
            route.continue_()
        else:
            held.append(route)

    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.route(f"**/jobs/{job.name}/logs/trainer-0/", hold)
        page.goto(f"{server.url}/jobs/{job.name}/")
        pump_until(page, lambda: held, 60)  # the reload for the state sent on connect
        choose_pserver_then_answer(page, held)


def test_a_reload_answer_after_another_tab_was_chosen_is_not_shown_when_the_page_is_set_up_late(
        transactional_db, alice, monkeypatch):
    """Its last deferred script (app.js) held, htmx has not set the page up (on DOMContentLoaded,
    which waits for that script) when the state sent on connect could come: a reload issued then
    was forgotten by htmx's setup, so the click on a tab did not abort it (a slow network's race)."""
    job = submit(alice)
    scripts, held = [], []  # app.js; every trainer-0 log request, answered late
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.route("**/static/js/app.js", lambda route: scripts.append(route))
        page.route(f"**/jobs/{job.name}/logs/trainer-0/", lambda route: held.append(route))
        page.goto(f"{server.url}/jobs/{job.name}/", wait_until="commit")
        pump_until(page, lambda: scripts, 30)
        with contextlib.suppress(AssertionError):  # a reload issued before the setup, if any
            pump_until(page, lambda: held, 3)
        scripts[0].continue_()
        pump_until(page, lambda: len(held) >= 2, 60)  # the panel's first load, and the reload
        choose_pserver_then_answer(page, held)


def test_the_job_page_fits_a_390_px_phone_without_horizontal_scrolling(page, live_server, alice):
    job = submit(alice)
    Job.objects.filter(pk=job.pk).update(message="a long message without spaces " + "y" * 400)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    expect(page.locator("#log pre.log")).to_contain_text("trainer pass 39")
    page.uncheck("#log-wrap")  # long lines scroll inside the log, not the page
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate("document.querySelector('#logs').classList.contains('nowrap')")


def test_the_page_says_when_the_live_connection_is_lost_and_when_it_is_back(transactional_db, alice, monkeypatch):
    job = submit(alice)
    routes = []

    def through(ws):  # the real server behind a route the test can cut
        ws.connect_to_server()
        routes.append(ws)

    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.route_web_socket("**/ws/jobs/**", through)
        page.goto(f"{server.url}/jobs/{job.name}/")
        page.wait_for_function("document.body.dataset.live === 'open'")
        expect(page.locator("#live-lost")).to_be_hidden()
        routes[-1].close()
        expect(page.locator("#live-lost")).to_be_visible()
        expect(page.locator("#live-lost")).to_contain_text("Live connection lost — reconnecting in")
        screenshot(page, "job-page-live-lost", full_page=False)
        page.wait_for_function("document.body.dataset.live === 'open'")  # the page reconnected by itself
        expect(page.locator("#live-lost")).to_be_hidden()
        assert len(routes) == 2


def test_reconnecting_waits_a_few_seconds_at_most_and_retry_now_connects_at_once(transactional_db, alice,
                                                                                 monkeypatch):
    """The server is down for a while: attempts back off, but never to more than 4 s apart (once
    43 s), so the page is live again seconds after the server; "Retry now" does not wait at all."""
    job = submit(alice)
    attempts: list[float] = []
    routes = []
    down = [False]

    def route(ws):
        attempts.append(time.monotonic())
        if down[0]:
            ws.close()  # refused, as by a server that is not back yet
        else:
            ws.connect_to_server()
            routes.append(ws)

    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.route_web_socket("**/ws/jobs/**", route)
        page.goto(f"{server.url}/jobs/{job.name}/")
        page.wait_for_function("document.body.dataset.live === 'open'")
        down[0] = True
        routes[-1].close()
        page.wait_for_function("document.body.dataset.live === 'closed'")
        pump_until(page, lambda: len(attempts) >= 8, 60)
        gaps = [b - a for a, b in itertools.pairwise(attempts[1:])]
        assert max(gaps) < 6, gaps  # capped at 4 s (and slack for a busy machine)
        page.wait_for_timeout(300)
        before = len(attempts)
        clicked = time.monotonic()
        page.click("#live-retry")
        pump_until(page, lambda: len(attempts) > before, 10)
        assert attempts[before] - clicked < 2.5
        # Back up: the next attempt, at most 4 s away, connects. (Clicking "Retry now" here would
        # race that attempt: once it connects, the button is hidden and the click never lands.)
        down[0] = False
        back = time.monotonic()
        page.wait_for_function("document.body.dataset.live === 'open'")
        assert time.monotonic() - back < 6  # the 4 s cap, and slack for a busy machine
        expect(page.locator("#live-lost")).to_be_hidden()


def pump_until(page, predicate, timeout: float) -> None:
    """Wait in Playwright's own loop (its route handlers run only while it runs) until `predicate`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(50)


def push(job, replica, offset: int, text: str, next_offset: int) -> None:
    """As the watcher pushes (from another thread: Playwright's loop runs in this one)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(notify.log_data, job.pk, replica.name, offset, text, next_offset).result()


def test_a_pushed_chunk_appends_only_what_continues_the_log_panel(transactional_db, alice, monkeypatch):
    job = submit(alice)
    replica = job.replicas.get(role="pserver", index=0)  # its log: "pserver output\n", 15 bytes
    Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.SUCCEEDED)  # no polls: only pushes change it
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        events = []  # the websocket's frames and the requests finished, in order
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: events.append("frame")))
        page.on("requestfinished", lambda request: events.append(request.url))
        page.goto(f"{server.url}/jobs/{job.name}/")
        page.click(".tabs a:has-text('pserver-0')")
        # The state sent on connect reloads the panel from the log file, which the pushes below
        # are not written to: they go after that reload.
        log = f"{server.url}/jobs/{job.name}/logs/pserver-0/"
        pump_until(page, lambda: "frame" in events and log in events[events.index("frame"):], 60)
        pre = page.locator("#log pre.log")
        expect(pre).to_have_text("pserver output\n")
        push(job, replica, 30, "after a gap\n", 42)  # left to the next poll
        push(job, replica, 0, "pserver output\nnext ✓\n", 24)  # overlaps the panel: only its end is new
        expect(pre).to_have_text("pserver output\nnext ✓\n")
        push(job, replica, 24, "and on\n", 31)
        expect(pre).to_have_text("pserver output\nnext ✓\nand on\n")


def test_the_state_sent_on_connect_reloads_the_log_but_not_the_page_when_it_is_the_pages_own(
        transactional_db, alice, monkeypatch):
    """The tabs are read again (the whole page fetched) only for a state they were not made for."""
    job = submit(alice)
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        requested = []
        page.on("request", lambda request: requested.append(request.url))
        log = f"{server.url}/jobs/{job.name}/logs/trainer-0/"
        page.goto(f"{server.url}/jobs/{job.name}/")
        pump_until(page, lambda: requested.count(log) >= 2, 60)  # the panel's first load, then the reload
        page.wait_for_load_state("networkidle")
    assert requested.count(f"{server.url}/jobs/{job.name}/") == 1


def test_the_loss_chart_switches_to_a_log_scale_and_smooths(page, live_server, alice):
    job = submit(alice)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    logstore.append(job.replicas.get(role="trainer", index=0),
                    b"".join(b'PADDLECLOUD_METRIC {"step": %d, "loss": %f}\n' % (i, 10 / i) for i in range(1, 30)))
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    page.locator("#chart canvas").first.wait_for()
    before = page.locator("#chart canvas").first.screenshot()
    page.check("#chart-log")
    page.locator("#chart-smooth").fill("0.9")
    expect(page.locator("#chart canvas")).to_have_count(1)
    assert page.locator("#chart canvas").first.screenshot() != before  # redrawn on the new scale
    assert errors == []


def test_following_keeps_the_newest_lines_in_view_and_unfollowing_keeps_the_place(page, live_server, alice):
    job = submit(alice)  # its replicas are Pending: the log panel refreshes itself
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    pre = page.locator("#log pre.log")
    expect(pre).to_contain_text("trainer pass 39")
    at_end = "(pre) => pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 2"
    assert pre.evaluate(at_end)
    page.uncheck("#log-follow")
    pre.evaluate("(pre) => { pre.scrollTop = 50; }")
    page.evaluate("""() => new Promise((done) =>
        document.body.addEventListener("htmx:afterSwap", done, { once: true }))""")  # the next refresh
    assert page.locator("#log pre.log").evaluate("(pre) => pre.scrollTop") == 50
    page.check("#log-follow")
    assert page.locator("#log pre.log").evaluate(at_end)


def test_the_compare_form_overlays_each_jobs_curves(page, live_server, alice):
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    for name, scale in [("fit", 10), ("fit.v2", 5)]:
        job = submit(alice) if name == "fit" else services.submit_job(alice, {
            "name": name, "package": make_package(alice, name, {"train.py": ""}), "entry": "python train.py"})
        lines = (b'PADDLECLOUD_METRIC {"step": %d, "loss": %f}\n' % (i, scale / i) for i in range(1, 9))
        logstore.append(job.replicas.get(role="trainer", index=0), b"".join(lines))
    page.goto(f"{live_server.url}/jobs/fit/")
    page.fill(".compare-form input[type=text]", "fit.v2")
    page.click(".compare-form button")
    page.wait_for_url(f"{live_server.url}/runs/compare/?job=fit&job=fit.v2")
    page.locator("#chart canvas").first.wait_for()
    expect(page.locator("#chart .u-legend .u-series")).to_have_count(5)  # x + each run raw and smoothed
    expect(page.locator("#chart .u-legend")).to_contain_text("fit.v2 (raw)")
    assert errors == []


def test_the_submit_form_shows_only_the_fields_the_chosen_datacenter_uses(page, live_server, alice):
    from accounts.models import Datacenter

    Datacenter.objects.create(name="cluster", backend="kubernetes")
    page.goto(f"{live_server.url}/jobs/new/")
    page.select_option("select[name=datacenter]", "local")
    for name in ("image", "registry", "gpu"):  # a local datacenter uses none of them
        expect(page.locator(f"#field-{name}")).to_be_hidden()
    expect(page.locator("#field-cpu")).to_be_visible()
    page.select_option("select[name=datacenter]", "cluster")
    for name in ("image", "registry", "gpu"):
        expect(page.locator(f"#field-{name}")).to_be_visible()


def test_the_delete_dialog_says_the_checkpoints_stay_and_offers_to_delete_them(page, live_server, alice):
    from jobs import checkpoints
    from pfs import services as pfs

    job = submit(alice)
    pfs.mkdir(alice, f"{checkpoints.where(job)}/pass-80")
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    page.click("button[data-open=delete-dialog]")
    dialog = page.locator("#delete-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Its checkpoints in /pfs/local/home/alice/jobs/fit/checkpoints stay")
    screenshot(page, "job-page-delete-dialog", full_page=False)
    dialog.locator("[data-close]").click()
    expect(dialog).to_be_hidden()
    page.click("button[data-open=delete-dialog]")
    dialog.locator("input[name=checkpoints]").check()
    dialog.locator("button.danger").click()
    page.wait_for_url(f"{live_server.url}/jobs/")
    expect(page.locator(".flash.success")).to_contain_text("Job fit deleted with its history, logs and checkpoints.")


def test_the_usage_chart_of_a_single_sample_spans_minutes_not_years(page, live_server, alice):
    from jobs.live import usage

    job = submit(alice)
    usage.record(job, {("trainer", 0): usage.Usage(memory_bytes=300 * 2**20, cpu_percent=80.0)})
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    page.locator("#usage-chart canvas").first.wait_for()
    span = page.evaluate("() => { const x = document.getElementById('usage-chart').plots[0].scales.x;"
                         " return x.max - x.min; }")
    assert 0 < span <= 600  # seconds; it once ran from 2027 to 2029


def test_the_log_header_follows_its_replicas_state(transactional_db, alice, monkeypatch):
    job = submit(alice)
    job.replicas.update(state=ReplicaState.RUNNING)
    with LiveASGI() as server, logged_in_browser(server.url, monkeypatch) as page:
        page.goto(f"{server.url}/jobs/{job.name}/")
        page.wait_for_function("document.body.dataset.live === 'open'")
        expect(page.locator("#log p.muted").first).to_contain_text("trainer-0 · Running")
        job.replicas.filter(role="trainer", index=0).update(state=ReplicaState.SUCCEEDED, exit_code=0)
        with ThreadPoolExecutor(1) as pool:  # as the watcher says so when it syncs the change
            pool.submit(notify.job_changed, job.pk).result()
        expect(page.locator("#log p.muted").first).to_contain_text("trainer-0 · Succeeded")


def test_enter_searches_the_whole_log_and_all_merges_every_log(page, live_server, alice):
    job = submit(alice)
    trainer = job.replicas.get(role="trainer", index=0)
    logstore.append(trainer, b"WARNING: learning rate too high\n")
    logstore.append(trainer, b"".join(b"trainer step %d\n" % i for i in range(400)))  # pushes it out of the panel
    page.goto(f"{live_server.url}/jobs/{job.name}/")
    expect(page.locator("#log pre.log")).to_contain_text("trainer step 399")
    page.fill("#log-search", "learning rate")
    expect(page.locator("#log-matches")).to_have_text("0 matches")  # not among the panel's lines
    page.press("#log-search", "Enter")
    results = page.locator("#log-results")
    expect(results).to_contain_text("1 line of the whole trainer-0 log holds")
    expect(results.locator("pre")).to_contain_text("WARNING: learning rate too high")
    screenshot(page, "job-page-log-search", full_page=False)
    page.click(".tabs a[data-log=all]")
    merged = page.locator("#log pre.log.merged")
    expect(merged).to_contain_text("[pserver-0] pserver output")
    expect(merged).to_contain_text("[trainer-0] trainer step 399")
    expect(page.locator("#log-search-all")).to_be_hidden()
