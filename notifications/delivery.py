"""Sending one webhook message: signed, to the checked address, in bounded time, reading no more
than a short prefix of the answer (the standard library's http.client on a socket of our own, so
that one deadline can cut off the whole exchange)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from .addresses import AddressRefused, Target, resolve
from .models import Delivery

SIGNATURE_HEADER = "X-PaddleCloud-Signature"
TIMESTAMP_HEADER = "X-PaddleCloud-Timestamp"
RESPONSE_PREFIX = 200  # bytes of a receiver's answer kept in the log; the rest is never read
MAX_BACKOFF = 3600.0
LOG_DAYS = 30  # deliveries older than this leave the log
# A pending delivery not tried for this long has lost its task (a broker outage when it was
# queued, or a retry message lost): longer than any wait between attempts.
STALLED = MAX_BACKOFF + 600
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
    """POST to the checked address, all of it (connecting, TLS, sending, the answer's head and
    prefix) within WEBHOOK_TIMEOUT: a socket timeout alone bounds each read, and a receiver
    trickling its answer a byte at a time could hold a worker thread for hours."""
    limit = float(settings.WEBHOOK_TIMEOUT)
    started = time.monotonic()
    cut = threading.Event()
    try:
        sock: socket.socket = socket.create_connection((target.address, target.port), timeout=limit)
    except OSError as e:
        return Outcome(error=f"cannot connect: {e}"[:300], retry=True)
    current = [sock]

    def hang_up() -> None:
        cut.set()
        with contextlib.suppress(OSError):
            current[0].shutdown(socket.SHUT_RDWR)  # wakes the blocked read

    timer = threading.Timer(max(0.0, limit - (time.monotonic() - started)), hang_up)
    timer.daemon = True
    timer.start()
    try:
        if target.scheme == "https":
            # Verified against the URL's host name, though connected to the checked address.
            sock = current[0] = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        conn = http.client.HTTPConnection(target.host, target.port, timeout=limit)
        conn.sock = sock
        default_port = 443 if target.scheme == "https" else 80
        host = f"[{target.host}]" if ":" in target.host else target.host
        conn.request("POST", target.path, body=body, headers={
            **headers, "Host": host if target.port == default_port else f"{host}:{target.port}",
            "Connection": "close"})
        response = conn.getresponse()
        prefix = response.read(RESPONSE_PREFIX)
        code = response.status
        return Outcome(code, "" if 200 <= code < 300 else f"HTTP {code}", prefix.decode("utf-8", "replace"),
                       retry=code >= 500 or code in RETRYABLE)
    except (OSError, http.client.HTTPException) as e:
        error = f"no complete answer within {limit:g} s" if cut.is_set() else f"{type(e).__name__}: {e}"
        return Outcome(error=error[:300], retry=True)
    finally:
        timer.cancel()
        current[0].close()


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
    when it is done (sent, given up on, gone, or being tried by another worker right now)."""
    now = timezone.now()
    # Claimed for the longest a send may take, so a task delivered twice (a worker lost before
    # acknowledging it, or the housekeeping's resend) does not send the message twice at once.
    claimed = Delivery.objects.filter(pk=delivery_id, status=Delivery.Status.PENDING).filter(
        Q(sending_until__isnull=True) | Q(sending_until__lt=now)).update(
        sending_until=now + timedelta(seconds=settings.WEBHOOK_TIMEOUT + 30))
    delivery = Delivery.objects.select_related("webhook").filter(pk=delivery_id).first() if claimed else None
    if delivery is None:
        return None
    outcome = send(delivery)
    attempts = delivery.attempts + 1
    done = outcome.ok or not outcome.retry or attempts >= settings.WEBHOOK_MAX_ATTEMPTS
    status = (Delivery.Status.SUCCEEDED if outcome.ok else Delivery.Status.FAILED) if done else Delivery.Status.PENDING
    Delivery.objects.filter(pk=delivery.pk).update(
        attempts=F("attempts") + 1, status=status, status_code=outcome.status_code, error=outcome.error,
        response=outcome.response, last_attempt=timezone.now(), sending_until=None)
    return None if done else backoff(attempts)


def stalled() -> list[int]:
    """Pending deliveries no task will try any more (see STALLED)."""
    before = timezone.now() - timedelta(seconds=STALLED)
    pending = Delivery.objects.filter(status=Delivery.Status.PENDING)
    return list(pending.filter(Q(last_attempt__lt=before) | Q(last_attempt__isnull=True, created__lt=before))
                .values_list("pk", flat=True)[:1000])


def prune() -> int:
    """Drop log entries older than LOG_DAYS; how many went."""
    return Delivery.objects.filter(created__lt=timezone.now() - timedelta(days=LOG_DAYS)).delete()[0]
