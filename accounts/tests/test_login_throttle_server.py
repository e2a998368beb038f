"""The login limit through the real web server `make run` starts (the Procfile's web command):
X-Forwarded-For must not reach Django as the client's address when no proxy is trusted."""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def web(tmp_path):
    """The Procfile's web process on its own state directory, with alice and a limit of 3."""
    port = free_port()
    env = {**os.environ, "PADDLECLOUD_VAR": str(tmp_path / "var"), "PADDLECLOUD_PORT": str(port),
           "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "LOGIN_FAILURE_LIMIT": "3",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for var in ("DATABASE_URL", "REDIS_URL"):
        env.pop(var, None)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    subprocess.run([*manage, "shell", "-c", "from django.contrib.auth.models import User; "
                    "User.objects.create_user('alice', password='password')"],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    command = re.search(r"^web:\s*(.+)$", (ROOT / "Procfile").read_text(), re.M).group(1)
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/api/v2/version/", timeout=2)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the web server did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
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
