"""The login limits through the real web server `make run` starts (the Procfile's web command),
over HTTP, with parallel clients and the real clock: X-Forwarded-For must not reach Django as the
client's address when no proxy is trusted, and behind a trusted proxy a spread attack gets no
more checks than the account's gate allows while the owner logs in from a new address."""

import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from .conftest import most_checks_per_queue

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web(tmp_path, **settings):
    """The Procfile's web process on its own state directory, with alice and `settings` (env)."""
    port = free_port()
    env = {**os.environ, "PADDLECLOUD_VAR": str(tmp_path / "var"), "PADDLECLOUD_PORT": str(port),
           "DJANGO_SETTINGS_MODULE": "paddleweb.settings", **settings,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for var in ("DATABASE_URL", "REDIS_URL"):
        env.pop(var, None)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    subprocess.run([*manage, "shell", "-c", "from django.contrib.auth.models import User; "
                    "User.objects.create_user('alice', password='password')"],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    command = re.search(r"^web:\s*(.+)$", (ROOT / "Procfile").read_text(), re.M).group(1)
    # Its log goes to a file: a pipe nobody reads while the test runs fills with the 429s' warnings
    # and then blocks the server's logging, and with it every request.
    log = tmp_path / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/api/v2/version/", timeout=2)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the web server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
    return proc, url


@pytest.fixture
def web(tmp_path):
    """No proxy trusted, and a per-address limit of 3."""
    proc, url = start_web(tmp_path, LOGIN_FAILURE_LIMIT="3")
    yield url
    proc.terminate()
    proc.wait(30)


def test_a_new_x_forwarded_for_on_each_try_does_not_get_round_the_limit_on_the_real_server(web):
    codes = [httpx.post(f"{web}/api/v2/auth/token/", json={"username": "alice", "password": "wrong"},
                        headers={"X-Forwarded-For": f"192.0.2.{i}"}, timeout=30).status_code for i in range(6)]
    assert codes == [400, 400, 429, 429, 429, 429]
    right = httpx.post(f"{web}/api/v2/auth/token/", json={"username": "alice", "password": "password"},
                       headers={"X-Forwarded-For": "192.0.2.99"}, timeout=30)
    assert right.status_code == 429 and "too many failed logins" in right.json()["detail"]


def test_the_login_page_answers_a_locked_out_address_with_the_cool_down_page_on_the_real_server(web):
    with httpx.Client(base_url=web, timeout=30) as browser:
        codes = []
        for i in range(4):
            browser.get("/login/")
            codes.append(browser.post("/login/", data={"username": "alice", "password": "wrong",
                                                       "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                                      headers={"X-Forwarded-For": f"192.0.2.{i}"}).status_code)
        res = browser.post("/login/", data={"username": "alice", "password": "password",
                                            "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert codes == [200, 200, 429, 429]
    assert res.status_code == 429 and "Too many failed logins" in res.text and "sessionid" not in browser.cookies


DELAY_MAX = 2  # seconds: the account's longest wait, short so the test sees many of them


@pytest.fixture
def web_behind_proxy(tmp_path):
    """One trusted proxy (X-Forwarded-For names the client) and a 2 s longest account wait."""
    proc, url = start_web(tmp_path, TRUSTED_PROXY_COUNT="1", LOGIN_ACCOUNT_DELAY_MAX=str(DELAY_MAX))
    yield url, tmp_path / "var" / "db.sqlite3"
    proc.terminate()
    proc.wait(30)


def test_a_spread_attack_gets_only_the_gates_checks_and_the_owner_still_logs_in_on_the_real_server(
        web_behind_proxy):
    url = f"{web_behind_proxy[0]}/api/v2/auth/token/"
    local = threading.local()

    def login(address: str, password: str = "wrong", username: str = "alice") -> httpx.Response:
        if not hasattr(local, "http"):  # a client (and its connection) per thread
            local.http = httpx.Client(timeout=60)
        return local.http.post(url, json={"username": username, "password": password},
                               headers={"X-Forwarded-For": address})

    # A sprayer's addresses, each of which has failed twice already (on other accounts).
    attackers = [f"203.0.113.{i}" for i in range(8)]
    for i, address in enumerate(attackers):
        assert [login(address, username=f"decoy{i}").status_code for _ in range(2)] == [400, 400]

    checked, stop = [], threading.Event()

    def hammer(address: str) -> None:
        while not stop.is_set():
            res = login(address)
            if res.status_code == 400:
                checked.append(address)
            assert res.status_code in (400, 429), res.text

    with ThreadPoolExecutor(len(attackers)) as pool:
        started = time.monotonic()
        hammering = [pool.submit(hammer, a) for a in attackers]
        while len(checked) < 6:  # the account's delay has reached its longest
            assert time.monotonic() - started < 120, "the attack got no checks"
            time.sleep(0.05)
        asked = time.monotonic()
        owner = login("198.51.100.7", "password")
        if owner.status_code == 429:
            wait = int(owner.headers["Retry-After"])
            assert wait <= DELAY_MAX
            time.sleep(wait)
            owner = login("198.51.100.7", "password")
        answered = time.monotonic()
        time.sleep(3 * DELAY_MAX)
        stop.set()
        for f in hammering:
            f.result()
    assert owner.status_code == 200 and owner.json()["token"]
    assert answered - asked < DELAY_MAX + 10  # the wait, and two requests on a busy machine
    # When each check started, as the server recorded it (a failed check stays recorded).
    with sqlite3.connect(web_behind_proxy[1]) as db:
        started_at = [datetime.fromisoformat(at) for (at,) in db.execute(
            "SELECT at FROM accounts_failedlogin WHERE username = 'alice' ORDER BY at")]
    assert len(started_at) == len(checked)
    span = (started_at[-1] - started_at[0]).total_seconds()
    # The attackers' addresses all wait in the other queue: its bound alone holds them.
    assert len(checked) <= most_checks_per_queue([0, 0, 0, 1, DELAY_MAX], span)
