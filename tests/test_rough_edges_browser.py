"""Rough edges a first user met in the browser (issue 22), checked in Debian's Chromium."""

import pytest
from playwright.sync_api import expect

from pfs.paths import home
from tests.screens import screenshot
from tests.support import needs_chromium

pytestmark = [pytest.mark.timeout(120), needs_chromium]


def test_the_share_expiry_field_shows_what_it_asks_for(page, live_server, alice):
    folder = home(alice, "local").disk
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.bin").write_bytes(b"weights")
    page.goto(f"{live_server.url}/files/local/home/alice/")
    page.click("details:has(form[hx-post$='/share/']) summary")
    field = page.locator("input[name=expires_days]")
    expect(field).to_be_visible()
    expect(page.locator(".share-expiry")).to_contain_text("Expires after")
    # Wide enough for a number of days and its placeholder, on one line with its label.
    assert field.evaluate("(el) => el.clientWidth >= 80 && el.scrollWidth <= el.clientWidth")
    box, label = field.bounding_box(), page.locator(".share-expiry").bounding_box()
    assert label["height"] < 2 * box["height"]
    screenshot(page, "files-share-expiry", full_page=False)
