"""Metric charts in Debian's Chromium: TensorBoard's debiased smoothing, the three x axes, any
metric, CSV export, and ten runs overlaid from the runs table."""

import csv
import io
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jobs import services
from jobs.live import logstore
from tests.screens import screenshot
from tests.support import make_package, needs_chromium

pytestmark = [pytest.mark.timeout(180), needs_chromium]

LOSSES = [573.0, 120.0, 48.0, 30.0, 19.0, 12.5, 9.0, 7.1, 5.6, 4.3]


def tensorboard_smoothing(values, weight):
    """TensorBoard's resampled EMA, as in its vz_line_chart: started at 0, debiased."""
    last, out = 0.0, []
    for n, v in enumerate(values, 1):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight ** n))
    return out


def run(user, name, losses, start=1_700_000_000.0, every=30.0):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective",
                                     "trainers": 1, "passes": len(losses)})
    logstore.append(job.replicas.get(), b"".join(
        b'PADDLECLOUD_METRIC {"step": %d, "loss": %r, "acc": %r, "wall": %r}\n' % (
            i + 1, loss, round(1 - loss / 600, 4), start + i * every) for i, loss in enumerate(losses)))
    return job


def test_smoothing_is_tensorboards_debiased_ema(page, live_server, alice):
    run(alice, "fit", LOSSES)
    page.goto(f"{live_server.url}/jobs/fit/")
    page.locator("#chart canvas").first.wait_for()
    for weight in (0.0, 0.6, 0.8, 0.99):
        got = page.evaluate(f"PaddleCharts.smooth({LOSSES}, {weight})")
        expected = tensorboard_smoothing(LOSSES, weight) if weight else LOSSES
        assert got == pytest.approx(expected, rel=1e-9)
    # 0.8 on a loss from 573 to 4.3: the smoothed curve starts where the raw one does (debiased, not
    # pulled towards 0) and falls with it all the way, not a flat line.
    smoothed = tensorboard_smoothing(LOSSES, 0.8)
    assert smoothed[0] == pytest.approx(573.0) and smoothed == sorted(smoothed, reverse=True) and smoothed[-1] < 40


def test_the_chart_switches_metric_and_x_axis_and_exports_csv(page, live_server, alice):
    run(alice, "fit", LOSSES)
    page.goto(f"{live_server.url}/jobs/fit/")
    page.locator("#chart canvas").first.wait_for()
    expect(page.locator("#chart-metric")).to_have_value("loss")
    x = "() => { const s = document.getElementById('chart').plot.scales.x; return [s.min, s.max]; }"
    assert page.evaluate(x) == [1, 10]
    page.select_option("#chart-x", "relative")
    assert page.evaluate(x) == [0, 270]  # 10 points 30 s apart
    page.select_option("#chart-x", "wall")
    lo, hi = page.evaluate(x)
    assert lo == pytest.approx(1_700_000_000) and hi == pytest.approx(1_700_000_270)
    page.select_option("#chart-metric", "acc")
    expect(page.locator("#chart .u-legend")).to_contain_text("trainer-0")
    page.locator("#chart-smooth").fill("0.8")
    screenshot(page, "job-page-chart", full_page=False)
    with page.expect_download() as download:
        page.click("#chart-csv")
    assert download.value.suggested_filename == "fit-acc.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert len(rows) == 10 and rows[0]["run"] == "trainer-0" and rows[0]["step"] == "1"
    assert rows[0]["wall_time"] == "2023-11-14T22:13:20.000Z" and rows[-1]["seconds_since_start"] == "270.000"
    assert float(rows[-1]["acc_smoothed"]) == pytest.approx(tensorboard_smoothing(
        [round(1 - v / 600, 4) for v in LOSSES], 0.8)[-1])


def test_ten_runs_ticked_in_the_runs_table_overlay_on_one_chart(page, live_server, alice):
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    for i in range(11):
        run(alice, f"lr-{i}", [v * (1 + i / 10) for v in LOSSES])
    page.goto(f"{live_server.url}/runs/?order=loss")
    expect(page.locator("table.runs tbody tr")).to_have_count(11)
    expect(page.locator("table.runs tbody tr").first).to_have_attribute("data-run", "lr-0")  # lowest final loss
    screenshot(page, "runs-table", full_page=False)
    boxes = page.locator("table.runs input[name=job]")
    for i in range(10):
        boxes.nth(i).check()
    expect(boxes.nth(10)).to_be_disabled()  # ten is the most one chart takes
    page.click("#overlay-go")
    page.wait_for_url("**/runs/compare/?job=*")
    page.locator("#chart canvas").first.wait_for()
    expect(page.locator("#chart .u-legend .u-series")).to_have_count(21)
    screenshot(page, "runs-compare", full_page=False)
    assert errors == []
