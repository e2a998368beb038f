"""/api/v2/health/ tells anyone only whether the service is up; what each part's state is, the
host names of the worker and watcher processes and an error's kind are for staff. The probes
(deploy/kubernetes/web.yaml) and load balancers read the status code, which `?only=` still
decides for everyone."""

import socket

import pytest
from django.test import Client

from core import health
from tests.support import token_client

pytestmark = pytest.mark.django_db

HOST = "health-test-host.internal"


@pytest.fixture
def worker_alive():
    """A worker and a watcher heartbeat from a host whose name must not leak."""
    for role in health.ROLES:
        health.beat(role, HOST)
    yield
    for role in health.ROLES:
        health.forget(role, HOST)


def test_anyone_gets_only_whether_the_service_is_up(worker_alive):
    res = Client().get("/api/v2/health/")
    assert res.status_code == 200 and res.json() == {"status": "ok"}
    assert HOST not in res.content.decode() and socket.gethostname() not in res.content.decode()


def test_a_user_who_is_not_staff_gets_no_details_either(worker_alive, alice_api):
    res = alice_api.get("/api/v2/health/")
    assert res.status_code == 200 and res.json() == {"status": "ok"}


def test_staff_get_each_parts_state_and_hosts(worker_alive, staff):
    res = token_client(staff).get("/api/v2/health/")
    assert res.status_code == 200 and res.json()["status"] == "ok"
    parts = res.json()["parts"]
    assert {name: part["up"] for name, part in parts.items()} == dict.fromkeys(
        ["web", "db", "redis", "worker", "watcher"], True)
    assert HOST in parts["worker"]["hosts"] and HOST in parts["watcher"]["hosts"]


def test_the_probes_status_codes_are_the_same_for_anyone(monkeypatch, staff):
    down = {"web": {"up": True}, "db": {"up": True}, "redis": {"up": True},
            "worker": {"up": False, "hosts": []}, "watcher": {"up": True, "hosts": [HOST]}}
    monkeypatch.setattr(health, "status", lambda: down)  # the parts' states are core/health.py's (tested there)
    for client in (Client(), token_client(staff)):
        assert client.get("/api/v2/health/").status_code == 503
        assert client.get("/api/v2/health/?only=web").status_code == 200
        assert client.get("/api/v2/health/?only=web,db,redis").status_code == 200
        assert client.get("/api/v2/health/?only=worker").status_code == 503
    anonymous = Client().get("/api/v2/health/")
    assert anonymous.json() == {"status": "unavailable"} and HOST not in anonymous.content.decode()
