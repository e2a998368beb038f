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


def test_a_named_token_is_made_on_the_tokens_page_and_shown_once(page, live_server, alice):
    page.goto(f"{live_server.url}/account/tokens/")
    page.fill("input[name=name]", "ci-nightly")
    page.click(".token-form button")
    secret = page.locator("#new-token-secret")
    expect(secret).to_be_visible()
    assert len(secret.input_value()) >= 32
    expect(page.locator("table.tokens")).to_contain_text("ci-nightly")
    screenshot(page, "tokens-new", full_page=False)
    page.goto(f"{live_server.url}/account/tokens/")
    expect(page.locator("#new-token-secret")).to_have_count(0)
    expect(page.locator("table.tokens td.last-used").first).to_have_text("never")


def test_the_webhooks_page_sends_a_test_and_edits_a_webhook(page, live_server, alice, settings):
    from notifications.models import Delivery, Webhook

    settings.WEBHOOK_ALLOW_PRIVATE = True
    Webhook.objects.create(user=alice, url="http://127.0.0.1:9/hook", events=["job.failed"], secret="s" * 32)
    page.goto(f"{live_server.url}/account/webhooks/")
    page.click("#webhooks button:has-text('Send test')")
    expect(page.locator(".flash.success")).to_contain_text("A test message is on its way")
    expect(page.locator("#deliveries")).to_contain_text("webhook.test")
    assert Delivery.objects.filter(event="webhook.test").count() == 1
    page.click("#webhooks a:has-text('Edit')")
    page.fill("input[name=url]", "http://127.0.0.1:10/other")
    page.click("button:has-text('Save')")
    expect(page.locator("#webhooks")).to_contain_text("http://127.0.0.1:10/other")
