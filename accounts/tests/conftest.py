"""Helpers for the brute-force tests: logins over each surface, the gate's clock moved by the
test, a password hasher that counts the passwords it checks, and a crowd of threads sending
requests at the same instant."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connections
from django.utils import timezone

from accounts import login_gate


def token_login(client, password, username="alice", **headers):
    return client.post("/api/v2/auth/token/", {"username": username, "password": password},
                       content_type="application/json", **headers)


def legacy_login(client, password, username="alice", **headers):
    return client.post("/api-token-auth/", {"username": username, "password": password},
                       content_type="application/json", **headers)


def form_login(client, password, username="alice", **headers):
    return client.post("/login/", {"username": username, "password": password}, **headers)


def admin_login(client, password, username="alice", **headers):
    return client.post("/admin/login/", {"username": username, "password": password}, **headers)


def most_checks_per_queue(delays: list[float], seconds: float) -> int:
    """The most checks one queue of the gate lets through in `seconds`, worked out from its
    delays (`delays[k-1]` after the k-th failure, the last one repeating): the k-th check of the
    span follows k-1 failures at least, so the next waits delays[k-1] or more, and every wait
    between the first check and the last fits in the span."""
    m, spent = 1, 0.0
    while spent + delays[min(m, len(delays)) - 1] < seconds:
        spent += delays[min(m, len(delays)) - 1]
        m += 1
    return m


class CountingHasher(MD5PasswordHasher):
    """A fast hasher that counts the passwords it verifies: the guesses that were checked."""

    checked = 0
    _lock = threading.Lock()

    def verify(self, password, encoded):
        with CountingHasher._lock:
            CountingHasher.checked += 1
        return super().verify(password, encoded)


@pytest.fixture
def checks(settings, alice):
    """alice's password under the counting hasher; returns the hasher class (`.checked`)."""
    settings.PASSWORD_HASHERS = [f"{__name__}.CountingHasher"]
    alice.set_password("password")
    alice.save()
    CountingHasher.checked = 0
    return CountingHasher


class Clock:
    def __init__(self):
        self.t = timezone.now()

    def __call__(self):
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch):
    """The gate's clock, moved only by the test (django-axes' per-address cool-down keeps real time)."""
    c = Clock()
    monkeypatch.setattr(login_gate, "now", c)
    return c


class Crowd:
    """Threads that send requests at the same instant (a barrier lets them go together), each
    taking a database connection for its request and giving it back at its end, as the threads
    of a web server do."""

    def __init__(self, size: int):
        self.pool = ThreadPoolExecutor(size)

    def send(self, calls):
        barrier = threading.Barrier(len(calls))

        def run(call):
            barrier.wait(timeout=60)
            try:
                return call()
            finally:  # as a server ends each request (the test Client does not)
                connections.close_all()

        return list(self.pool.map(run, calls))

    def close(self):
        self.pool.shutdown()


@pytest.fixture
def crowd(transactional_db):
    c = Crowd(12)
    yield c
    c.close()
