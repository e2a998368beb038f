"""Checking a webhook: a signed test message on request, a delivery sent again, a webhook edited,
and each delivery's job named in the log (real worker, real receiver)."""

import json

import pytest

from jobs.state.transitions import transition
from notifications import services
from notifications.models import Delivery, Webhook
from tests.support import make_job, token_client, wait_for, webhook_signature

from .receiver import receiver

pytestmark = pytest.mark.django_db(transaction=True)


def hook_of(user, url):
    res = token_client(user).post("/api/v2/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")
    assert res.status_code == 201, res.content
    return res.json()


def test_send_test_posts_a_signed_test_message(worker, alice, client, hook_receiver):
    hook = hook_of(alice, hook_receiver.url)
    client.force_login(alice)
    res = client.post(f"/account/webhooks/{hook['id']}/test/", follow=True)
    assert "A test message is on its way" in res.content.decode()
    sent = wait_for(lambda: hook_receiver.requests, what="the test message")[0]
    assert sent.headers["X-PaddleCloud-Event"] == "webhook.test"
    stamp = sent.headers["X-PaddleCloud-Timestamp"]
    assert sent.headers["X-PaddleCloud-Signature"] == webhook_signature(hook["secret"], stamp, sent.body)
    assert json.loads(sent.body)["job"] is None
    logged = wait_for(lambda: Delivery.objects.filter(status="succeeded", event="webhook.test").first())
    assert logged.attempts == 1
    api = token_client(alice)
    assert api.post(f"/api/v2/webhooks/{hook['id']}/test/").status_code == 202


def test_a_delivery_is_sent_again_and_the_log_names_its_job(worker, alice, bob, datacenter, client, allow_private):
    with receiver(answers=[400]) as r:  # refused: not retried
        hook = hook_of(alice, r.url)
        transition(make_job(alice, datacenter, name="sweep-7"), "Failed", "ReplicaFailed", "exit 3")
        first = wait_for(lambda: Delivery.objects.filter(status="failed").first(), what="the refused delivery")
        client.force_login(alice)
        page = client.get("/account/webhooks/").content.decode()
        assert '<td class="job"><a href="/jobs/sweep-7/">sweep-7</a></td>' in page
        assert f"/account/webhooks/deliveries/{first.pk}/redeliver/" in page
        client.post(f"/account/webhooks/deliveries/{first.pk}/redeliver/")
        again = wait_for(lambda: Delivery.objects.filter(status="succeeded").first(), what="the redelivery")
        assert again.pk != first.pk and again.payload == first.payload
        assert len(r.requests) == 2 and json.loads(r.requests[1].body)["job"]["name"] == "sweep-7"
    listed = token_client(alice).get(f"/api/v2/webhooks/{hook['id']}/deliveries/").json()["results"]
    assert {d["job"] for d in listed} == {"sweep-7"}
    client.force_login(bob)
    assert client.post(f"/account/webhooks/deliveries/{first.pk}/redeliver/").status_code == 404
    assert token_client(bob).post(f"/api/v2/webhooks/{hook['id']}/deliveries/{first.pk}/redeliver/").status_code \
        == 404


def test_a_webhook_is_edited_on_its_page(alice, bob, client, allow_private):
    hook = hook_of(alice, "http://127.0.0.1:9/hook")
    client.force_login(alice)
    form = client.get(f"/account/webhooks/{hook['id']}/edit/").content.decode()
    assert 'value="http://127.0.0.1:9/hook"' in form and "webhook.test" not in form
    res = client.post(f"/account/webhooks/{hook['id']}/edit/", {
        "url": "http://127.0.0.1:10/other", "events": ["job.succeeded", "job.killed"], "secret": ""})
    assert res.status_code == 302
    saved = Webhook.objects.get(pk=hook["id"])
    assert (saved.url, saved.events, saved.active, saved.secret) == (
        "http://127.0.0.1:10/other", ["job.succeeded", "job.killed"], False, hook["secret"])  # unticked: off
    res = client.post(f"/account/webhooks/{hook['id']}/edit/", {"url": "ftp://x", "events": [], "active": "on"})
    assert res.status_code == 200 and "choose at least one" in res.content.decode().lower() or "required" in (
        res.content.decode().lower())
    client.force_login(bob)
    assert client.get(f"/account/webhooks/{hook['id']}/edit/").status_code == 404
    assert services.webhooks_of(bob).count() == 0
