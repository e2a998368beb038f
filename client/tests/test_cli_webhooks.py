"""`paddlectl webhooks` lists, adds and deletes the user's webhooks against a live server."""

import json

from notifications.models import Delivery, Webhook

from .conftest import run_cli

PUBLIC = "https://93.184.216.34/hooks/paddle"  # a literal public address: checking it needs no DNS


def test_webhooks_are_added_with_their_secret_shown_once_listed_and_deleted(config, alice):
    assert run_cli("login").code == 0
    res = run_cli("webhooks", "add", PUBLIC, "-events", "job.failed,job.killed")
    assert res.code == 0, res.err
    hook = Webhook.objects.get(user=alice)
    assert hook.events == ["job.failed", "job.killed"] and hook.secret in res.out
    listed = run_cli("webhooks", "-o", "json")
    assert res.code == 0 and hook.secret not in listed.out
    assert [(h["id"], h["url"]) for h in json.loads(listed.out)] == [(hook.pk, PUBLIC)]
    assert run_cli("webhooks").lines[0].split() == ["ID", "URL", "EVENTS", "ACTIVE", "CREATED"]

    Delivery.objects.create(webhook=hook, event="job.failed", payload={}, status="failed", attempts=6,
                            status_code=502, error="HTTP 502")
    log = run_cli("webhooks", "deliveries", str(hook.pk), "-o", "json")
    assert log.code == 0 and [(d["status"], d["status_code"]) for d in json.loads(log.out)] == [("failed", 502)]

    assert run_cli("webhooks", "delete").code == 2
    res = run_cli("webhooks", "delete", str(hook.pk))
    assert res.code == 0 and f"webhook {hook.pk} deleted" in res.out and not Webhook.objects.exists()
    assert run_cli("webhooks", "delete", str(hook.pk)).code == 1


def test_a_private_webhook_url_is_refused_with_the_reason(config, alice):
    assert run_cli("login").code == 0
    res = run_cli("webhooks", "add", "http://127.0.0.1:8000/")
    assert res.code == 1 and "private, loopback or reserved" in res.err
    assert run_cli("webhooks", "add").code == 2
    assert not Webhook.objects.exists()
