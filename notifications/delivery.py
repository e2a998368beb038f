"""Sending one webhook message: signed, to the checked address, with bounded time and reading."""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import time
from dataclasses import dataclass

import urllib3
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from .addresses import AddressRefused, Target, resolve
from .models import Delivery

SIGNATURE_HEADER = "X-PaddleCloud-Signature"
TIMESTAMP_HEADER = "X-PaddleCloud-Timestamp"
RESPONSE_PREFIX = 200  # bytes of a receiver's answer kept in the log; the rest is never read
MAX_BACKOFF = 3600.0
# Answers that mean "try again later"; any other non-2xx is the receiver refusing the message.
RETRYABLE = {408, 425, 429}


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over "<timestamp>.<body>": the timestamp is signed too, so a receiver that
    refuses old timestamps cannot be fed a captured message again."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


@dataclass
class Outcome:
    status_code: int | None = None
    error: str = ""
    response: str = ""
    retry: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _post(target: Target, body: bytes, headers: dict[str, str]) -> Outcome:
    timeout = urllib3.Timeout(total=settings.WEBHOOK_TIMEOUT)
    pool: urllib3.HTTPConnectionPool
    if target.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(target.address, target.port, timeout=timeout, retries=False,
                                           ssl_context=ssl.create_default_context(),
                                           server_hostname=target.host, assert_hostname=target.host)
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, timeout=timeout, retries=False)
    default_port = 443 if target.scheme == "https" else 80
    host = target.host if ":" not in target.host else f"[{target.host}]"
    headers = {**headers, "Host": host if target.port == default_port else f"{host}:{target.port}"}
    try:
        response = pool.urlopen("POST", target.path, body=body, headers=headers, redirect=False,
                                assert_same_host=False, preload_content=False)
        try:
            prefix = response.read(RESPONSE_PREFIX, decode_content=False)[:RESPONSE_PREFIX]
        finally:
            response.release_conn()
        code = response.status
        return Outcome(code, "" if 200 <= code < 300 else f"HTTP {code}",
                       prefix.decode("utf-8", "replace"), retry=code >= 500 or code in RETRYABLE)
    except urllib3.exceptions.HTTPError as e:
        return Outcome(error=f"{type(e).__name__}: {e}"[:300], retry=True)
    finally:
        pool.close()


def send(delivery: Delivery) -> Outcome:
    body = json.dumps({**delivery.payload, "delivery": delivery.pk}, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))  # each attempt is signed afresh, so a retry is not "old"
    try:
        target = resolve(delivery.webhook.url)
    except AddressRefused as e:
        return Outcome(error=str(e)[:300])
    return _post(target, body, {
        "Content-Type": "application/json", "User-Agent": "PaddleCloud-Webhook",
        "X-PaddleCloud-Event": delivery.event, "X-PaddleCloud-Delivery": str(delivery.pk),
        TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(delivery.webhook.secret, timestamp, body)})


def backoff(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed attempt."""
    return float(min(settings.WEBHOOK_RETRY_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF))


def attempt(delivery_id: int) -> float | None:
    """Try a pending delivery once and log how it went; seconds until the next try, or None
    when it is done (sent, given up on, or gone)."""
    delivery = Delivery.objects.select_related("webhook").filter(
        pk=delivery_id, status=Delivery.Status.PENDING).first()
    if delivery is None:
        return None
    outcome = send(delivery)
    attempts = delivery.attempts + 1
    done = outcome.ok or not outcome.retry or attempts >= settings.WEBHOOK_MAX_ATTEMPTS
    status = (Delivery.Status.SUCCEEDED if outcome.ok else Delivery.Status.FAILED) if done else Delivery.Status.PENDING
    Delivery.objects.filter(pk=delivery.pk).update(
        attempts=F("attempts") + 1, status=status, status_code=outcome.status_code, error=outcome.error,
        response=outcome.response, last_attempt=timezone.now())
    return None if done else backoff(attempts)
