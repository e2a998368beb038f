"""Job state changes reach webhooks (signed, retried, logged) and opted-in e-mail, through a real
Celery worker and a real local HTTP receiver."""

import json
import ssl
import time

import pytest
from django.core import mail

from jobs.services import kill_job
from jobs.state.transitions import transition
from notifications import delivery, services
from notifications.models import Delivery
from tests.support import make_job, token_client, wait_for, webhook_signature

from .receiver import receiver, trickling_receiver


def _add_hook(user, url, events=("job.succeeded", "job.failed", "job.killed")):
    res = token_client(user).post("/api/v2/webhooks/", {"url": url, "events": list(events)}, format="json")
    assert res.status_code == 201, res.content
    return res.json()


def test_a_failed_job_posts_a_signed_message_the_receiver_can_verify(worker, alice, datacenter, hook_receiver):
    hook = _add_hook(alice, hook_receiver.url)
    job = make_job(alice, datacenter)
    assert transition(job, "Failed", "ReplicaFailed", "trainer-0 exited 3")

    sent = wait_for(lambda: hook_receiver.requests, what="the webhook message")[0]
    assert sent.path == "/hook?from=paddlecloud"
    stamp = sent.headers["X-PaddleCloud-Timestamp"]
    assert abs(int(stamp) - time.time()) < 60
    assert sent.headers["X-PaddleCloud-Signature"] == webhook_signature(hook["secret"], stamp, sent.body)
    assert sent.headers["X-PaddleCloud-Event"] == "job.failed"
    payload = json.loads(sent.body)
    assert payload["event"] == "job.failed" and payload["webhook"] == hook["id"]
    assert payload["job"]["name"] == "fit" and payload["job"]["message"] == "trainer-0 exited 3"
    logged = wait_for(lambda: Delivery.objects.filter(status="succeeded").first(), what="the logged delivery")
    assert (logged.attempts, logged.status_code, logged.error) == (1, 200, "")
    assert logged.response.startswith("ok ok") and len(logged.response) == delivery.RESPONSE_PREFIX


def test_a_message_tampered_with_or_replayed_late_fails_the_signature_check(alice):
    body = b'{"event":"job.failed"}'
    good = delivery.signature("s" * 32, "1000", body)
    assert good == webhook_signature("s" * 32, "1000", body)
    assert good != delivery.signature("s" * 32, "1000", body.replace(b"failed", b"succeeded"))
    assert good != delivery.signature("s" * 32, "2000", body)  # the timestamp is in the signed material


def test_a_receiver_answering_500_is_retried_until_it_accepts(worker, alice, datacenter, allow_private):
    with receiver(answers=[500, 503]) as r:
        _add_hook(alice, r.url)
        job = make_job(alice, datacenter)
        assert transition(job, "Succeeded", "Completed", "all 1 trainers exited 0")
        done = wait_for(lambda: Delivery.objects.filter(status="succeeded").first(), what="the retried delivery")
    assert (done.attempts, done.status_code) == (3, 200)
    assert len(r.requests) == 3
    assert len({req.headers["X-PaddleCloud-Delivery"] for req in r.requests}) == 1
    assert {json.loads(req.body)["event"] for req in r.requests} == {"job.succeeded"}


def test_a_delivery_is_given_up_after_the_last_attempt_and_a_refusal_is_not_retried(alice, datacenter,
                                                                                       allow_private):
    allow_private.WEBHOOK_MAX_ATTEMPTS = 2
    with receiver(answers=[500, 500, 404]) as r:
        hook = services.create_webhook(alice, url=r.url, events=["job.failed"])
        first = Delivery.objects.create(webhook=hook, event="job.failed", payload={"event": "job.failed"})
        assert delivery.attempt(first.pk) == pytest.approx(0.2)
        assert delivery.attempt(first.pk) is None
        first.refresh_from_db()
        assert (first.status, first.attempts, first.status_code, first.error) == ("failed", 2, 500, "HTTP 500")
        assert delivery.attempt(first.pk) is None and len(r.requests) == 2  # never sent again

        refused = Delivery.objects.create(webhook=hook, event="job.failed", payload={"event": "job.failed"})
        assert delivery.attempt(refused.pk) is None
        refused.refresh_from_db()
        assert (refused.status, refused.attempts, refused.status_code) == ("failed", 1, 404)


def test_an_unreachable_receiver_is_logged_as_an_error(alice, allow_private):
    with receiver() as r:
        url = r.url  # closed on leaving: nothing listens there any more
    hook = services.create_webhook(alice, url=url, events=["job.failed"])
    d = Delivery.objects.create(webhook=hook, event="job.failed", payload={})
    assert delivery.attempt(d.pk) == pytest.approx(0.2)
    d.refresh_from_db()
    assert d.status == "pending" and d.status_code is None and "Connection" in d.error


def test_only_subscribed_active_webhooks_of_the_jobs_owner_are_sent_the_event(worker, alice, bob, datacenter,
                                                                                allow_private):
    with receiver() as started_only, receiver() as inactive, receiver() as bobs, receiver() as killed:
        services.create_webhook(alice, url=started_only.url, events=["job.started"])
        off = services.create_webhook(alice, url=inactive.url, events=["job.killed"])
        services.update_webhook(off, active=False)
        services.create_webhook(bob, url=bobs.url, events=["job.killed"])
        services.create_webhook(alice, url=killed.url, events=["job.killed"])
        kill_job(make_job(alice, datacenter))
        wait_for(lambda: killed.requests, what="the job.killed message")
        assert json.loads(killed.requests[0].body)["job"]["state"] == "Killed"
        assert Delivery.objects.count() == 1
    assert not started_only.requests and not inactive.requests and not bobs.requests


def test_a_job_end_is_emailed_to_owners_who_opted_in(worker, alice, bob, datacenter):
    services.set_email_on_job_end(alice, True)
    transition(make_job(bob, datacenter, "bobs"), "Failed", "ReplicaFailed", "exit 1")
    job = make_job(alice, datacenter)
    transition(job, "Running", "Running", "all 2 replicas started", from_states=["Starting", "Running"])
    transition(job, "Succeeded", "Completed", "all 1 trainers exited 0")
    message = wait_for(lambda: mail.outbox, what="the e-mail")[0]
    assert message.to == ["alice@example.com"] and message.subject == "[PaddleCloud] job fit succeeded"
    assert "all 1 trainers exited 0" in message.body and "/jobs/fit/" in message.body
    assert len(mail.outbox) == 1  # not bob's (not opted in), and none for the start


def test_a_receiver_trickling_its_answer_is_cut_off_at_the_timeout(alice, allow_private):
    allow_private.WEBHOOK_TIMEOUT = 1.0
    with trickling_receiver() as url:
        hook = services.create_webhook(alice, url=url, events=["job.failed"])
        d = Delivery.objects.create(webhook=hook, event="job.failed", payload={})
        began = time.monotonic()
        assert delivery.attempt(d.pk) == pytest.approx(0.2)
        took = time.monotonic() - began
    d.refresh_from_db()
    assert took < 5 and d.error == "no complete answer within 1 s" and d.status == "pending"


def test_https_receivers_get_the_message_only_with_a_certificate_that_verifies(alice, allow_private, tmp_path,
                                                                                monkeypatch):
    from client.tests.tls_proxy import CertAuthority

    ca = CertAuthority(tmp_path / "ca")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*ca.issue("receiver", server=True))
    with receiver(tls=context) as r:
        hook = services.create_webhook(alice, url=r.url, events=["job.failed"])
        untrusted = Delivery.objects.create(webhook=hook, event="job.failed", payload={})
        assert delivery.attempt(untrusted.pk) is not None  # retried later: the CA is not trusted
        untrusted.refresh_from_db()
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.error and not r.requests

        monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))  # read by ssl.create_default_context
        trusted = Delivery.objects.create(webhook=hook, event="job.failed", payload={"event": "job.failed"})
        assert delivery.attempt(trusted.pk) is None
    trusted.refresh_from_db()
    assert (trusted.status, trusted.status_code) == ("succeeded", 200)
    assert r.requests[0].headers["Host"] == f"127.0.0.1:{r.url.split(':')[2].split('/')[0]}"


def test_deliveries_whose_task_was_lost_are_found_and_old_log_entries_dropped(alice):
    from datetime import timedelta

    from django.utils import timezone

    hook = services.create_webhook(alice, url="https://93.184.216.34/", events=["job.failed"])
    long_ago = timezone.now() - timedelta(seconds=delivery.STALLED + 60)
    never_tried = Delivery.objects.create(webhook=hook, event="job.failed", payload={})
    waiting = Delivery.objects.create(webhook=hook, event="job.failed", payload={}, attempts=3,
                                      last_attempt=timezone.now())
    lost_retry = Delivery.objects.create(webhook=hook, event="job.failed", payload={}, attempts=2,
                                         last_attempt=long_ago)
    done = Delivery.objects.create(webhook=hook, event="job.failed", payload={}, status="succeeded",
                                   last_attempt=long_ago)
    Delivery.objects.filter(pk__in=[never_tried.pk, lost_retry.pk, done.pk]).update(created=long_ago)
    assert sorted(delivery.stalled()) == [never_tried.pk, lost_retry.pk]
    assert waiting.pk not in delivery.stalled()

    Delivery.objects.filter(pk=done.pk).update(created=timezone.now() - timedelta(days=delivery.LOG_DAYS + 1))
    assert delivery.prune() == 1 and not Delivery.objects.filter(pk=done.pk).exists()


def test_housekeeping_sends_a_delivery_whose_task_was_lost(worker, alice, hook_receiver):
    from datetime import timedelta

    from django.utils import timezone

    from notifications.tasks import housekeeping

    hook = services.create_webhook(alice, url=hook_receiver.url, events=["job.failed"])
    lost = Delivery.objects.create(webhook=hook, event="job.failed", payload={"event": "job.failed"})
    Delivery.objects.filter(pk=lost.pk).update(created=timezone.now() - timedelta(seconds=delivery.STALLED + 60))
    housekeeping()
    wait_for(lambda: Delivery.objects.filter(pk=lost.pk, status="succeeded").exists(), what="the lost delivery")
    assert len(hook_receiver.requests) == 1


def test_a_delivery_being_sent_is_not_sent_again_at_the_same_time(alice, allow_private):
    from datetime import timedelta

    from django.utils import timezone

    with receiver() as r:
        hook = services.create_webhook(alice, url=r.url, events=["job.failed"])
        d = Delivery.objects.create(webhook=hook, event="job.failed", payload={},
                                    sending_until=timezone.now() + timedelta(seconds=30))
        assert delivery.attempt(d.pk) is None and not r.requests  # another worker holds it
        Delivery.objects.filter(pk=d.pk).update(sending_until=timezone.now() - timedelta(seconds=1))
        assert delivery.attempt(d.pk) is None and len(r.requests) == 1  # that worker was lost: sent now
    d.refresh_from_db()
    assert d.status == "succeeded" and d.sending_until is None
