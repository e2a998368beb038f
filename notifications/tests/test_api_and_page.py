"""/api/v2/webhooks/ and the settings → Webhooks page: owner-only, URLs checked against SSRF, the
secret shown once, the delivery log listed."""

import pytest

from notifications import delivery, services
from notifications.models import Delivery, Webhook

from .receiver import receiver

PUBLIC = "https://93.184.216.34/hooks/paddle"  # a literal public address: checking it needs no DNS


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/", "http://localhost/", "http://10.1.2.3/", "http://192.168.0.1/",
    "http://169.254.169.254/latest/meta-data/", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
    "http://100.64.0.1/", "http://0.0.0.0/", "http://224.0.0.1/",
])
def test_private_loopback_and_reserved_targets_are_refused(alice_api, url):
    res = alice_api.post("/api/v2/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")
    assert res.status_code == 400 and "private, loopback or reserved" in res.json()["url"][0]
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://93.184.216.34/", "http:// or https://"), ("file:///etc/passwd", "http:// or https://"),
    ("http://user:pw@93.184.216.34/", "no user name or password"), ("http:///path", "no host"),
    ("http://93.184.216.34:99999/", "not a valid URL"), ("", "http:// or https://"),
    ("http://93.184.216.34/a b", "spaces"),
])
def test_urls_that_are_not_plain_http_are_refused_with_the_reason(alice_api, url, why):
    res = alice_api.post("/api/v2/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")
    assert res.status_code == 400 and why in res.json()["url"][0]


def test_an_address_that_turned_private_is_not_sent_to(alice, settings):
    """Checked again when sending: a name may resolve elsewhere later, and an operator may have
    turned private targets off since."""
    settings.WEBHOOK_ALLOW_PRIVATE = True
    with receiver() as r:
        hook = services.create_webhook(alice, url=r.url, events=["job.failed"])
        settings.WEBHOOK_ALLOW_PRIVATE = False
        d = Delivery.objects.create(webhook=hook, event="job.failed", payload={})
        assert delivery.attempt(d.pk) is None
    d.refresh_from_db()
    assert not r.requests and d.status == "failed" and "private, loopback" in d.error


def test_webhooks_are_created_with_a_secret_shown_once_and_listed_without_it(alice_api):
    res = alice_api.post("/api/v2/webhooks/", {"url": PUBLIC, "events": ["job.failed", "job.failed"]}, format="json")
    assert res.status_code == 201, res.content
    created = res.json()
    assert len(created["secret"]) == 64 and created["events"] == ["job.failed"] and created["active"] is True
    listed = alice_api.get("/api/v2/webhooks/").json()["results"]
    assert [h["id"] for h in listed] == [created["id"]] and "secret" not in listed[0]
    own = alice_api.post("/api/v2/webhooks/", {"url": PUBLIC, "events": ["job.killed"], "secret": "x" * 20},
                         format="json")
    assert own.status_code == 201 and Webhook.objects.get(pk=own.json()["id"]).secret == "x" * 20


def test_bad_events_and_short_secrets_get_field_errors(alice_api):
    res = alice_api.post("/api/v2/webhooks/", {"url": PUBLIC, "events": ["job.exploded"]}, format="json")
    assert res.status_code == 400 and "job.exploded" in res.json()["events"][0]
    res = alice_api.post("/api/v2/webhooks/", {"url": PUBLIC, "events": []}, format="json")
    assert res.status_code == 400 and "at least one" in res.json()["events"][0]
    res = alice_api.post("/api/v2/webhooks/", {"url": PUBLIC, "events": ["job.failed"], "secret": "short"},
                         format="json")
    assert res.status_code == 400 and "16 characters" in res.json()["secret"][0]


def test_webhooks_are_changed_and_deleted_by_their_owner_only(alice_api, bob_api, alice):
    hook = services.create_webhook(alice, url=PUBLIC, events=["job.failed"])
    url = f"/api/v2/webhooks/{hook.pk}/"
    assert bob_api.get(url).status_code == 404
    assert bob_api.patch(url, {"active": False}, format="json").status_code == 404
    assert bob_api.delete(url).status_code == 404
    res = alice_api.patch(url, {"events": ["job.started"], "active": False}, format="json")
    assert res.status_code == 200 and res.json()["events"] == ["job.started"] and res.json()["active"] is False
    assert alice_api.patch(url, {"url": "http://10.0.0.1/"}, format="json").status_code == 400
    assert alice_api.delete(url).status_code == 204 and not Webhook.objects.exists()


def test_the_delivery_log_lists_a_webhooks_messages_to_its_owner(alice_api, bob_api, alice):
    hook = services.create_webhook(alice, url=PUBLIC, events=["job.failed"])
    Delivery.objects.create(webhook=hook, event="job.failed", payload={}, status="failed", attempts=6,
                            status_code=502, error="HTTP 502")
    res = alice_api.get(f"/api/v2/webhooks/{hook.pk}/deliveries/")
    assert res.status_code == 200
    [row] = res.json()["results"]
    assert (row["event"], row["status"], row["attempts"], row["status_code"], row["error"]) == (
        "job.failed", "failed", 6, 502, "HTTP 502")
    assert bob_api.get(f"/api/v2/webhooks/{hook.pk}/deliveries/").status_code == 404


def test_a_user_has_at_most_a_bounded_number_of_webhooks(alice):
    for _ in range(services.MAX_WEBHOOKS):
        services.create_webhook(alice, url=PUBLIC, events=["job.failed"])
    with pytest.raises(services.ValidationError, match="delete one first"):
        services.create_webhook(alice, url=PUBLIC, events=["job.failed"])


def test_the_page_adds_lists_and_deletes_webhooks_and_shows_the_log(client, alice, bob):
    client.force_login(alice)
    res = client.post("/account/webhooks/", {"url": "http://127.0.0.1/", "events": ["job.failed"]})
    assert res.status_code == 200 and "private, loopback or reserved" in res.content.decode()
    res = client.post("/account/webhooks/", {"url": PUBLIC, "events": ["job.failed", "job.killed"]}, follow=True)
    hook = Webhook.objects.get(user=alice)
    assert f"shown only this once: {hook.secret}" in res.content.decode()
    Delivery.objects.create(webhook=hook, event="job.killed", payload={}, status="succeeded", attempts=2,
                            status_code=204)
    page = client.get("/account/webhooks/").content.decode()
    assert PUBLIC in page and "job.failed, job.killed" in page and "succeeded" in page and hook.secret not in page
    client.force_login(bob)
    assert client.post(f"/account/webhooks/{hook.pk}/delete/").status_code == 404
    assert PUBLIC not in client.get("/account/webhooks/").content.decode()
    client.force_login(alice)
    client.post(f"/account/webhooks/{hook.pk}/delete/")
    assert not Webhook.objects.exists()


def test_the_page_turns_job_end_email_on_and_off(client, alice):
    client.force_login(alice)
    client.post("/account/webhooks/email/", {"job_end": "on"})
    assert services.email_on_job_end(alice)
    assert 'checked' in client.get("/account/webhooks/").content.decode()
    client.post("/account/webhooks/email/", {})
    assert not services.email_on_job_end(alice)


def test_staff_see_webhooks_and_deliveries_in_the_admin_but_never_a_secret(client, staff, alice):
    hook = services.create_webhook(alice, url=PUBLIC, events=["job.failed"])
    Delivery.objects.create(webhook=hook, event="job.failed", payload={}, status="failed", error="HTTP 502")
    client.force_login(staff)
    staff.is_superuser = True
    staff.save()
    for url in ("/admin/notifications/webhook/", f"/admin/notifications/webhook/{hook.pk}/change/",
                "/admin/notifications/delivery/"):
        res = client.get(url)
        assert res.status_code == 200 and hook.secret not in res.content.decode()


def test_a_new_secret_replaces_the_old_one_at_once(alice_api, alice):
    hook = services.create_webhook(alice, url=PUBLIC, events=["job.failed"])
    old = hook.secret
    assert alice_api.patch(f"/api/v2/webhooks/{hook.pk}/", {"secret": "short"}, format="json").status_code == 400
    res = alice_api.patch(f"/api/v2/webhooks/{hook.pk}/", {"secret": "n" * 24}, format="json")
    assert res.status_code == 200 and "secret" not in res.json()
    hook.refresh_from_db()
    assert hook.secret == "n" * 24 != old
