"""Production settings from the environment: HTTPS=true turns on secure cookies, HSTS and the
SSL redirect (X-Forwarded-Proto trusted only behind the operator's proxies); off for `make run`."""

import json
import subprocess
import sys
from pathlib import Path

from tests.support import fresh_environment, in_fresh_settings

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
from django.conf import settings
from django.test import Client
names = ["SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS",
         "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SECURE_PROXY_SSL_HEADER"]
plain = Client().get("/login/")
proxied = Client().get("/login/", headers={"X-Forwarded-Proto": "https"})
print(json.dumps({"settings": {n: getattr(settings, n) for n in names},
                  "plain": [plain.status_code, plain.headers.get("Location")],
                  "proxied": [proxied.status_code, proxied.headers.get("Strict-Transport-Security"),
                              proxied.cookies["csrftoken"]["secure"] if "csrftoken" in proxied.cookies else None]}))
"""


HOSTS = {"ALLOWED_HOSTS": "testserver,paddlecloud.example.com"}


def probe(tmp_path, **env):
    return json.loads(in_fresh_settings(tmp_path, PROBE, **{**HOSTS, **env}))


def check_deploy(tmp_path, **env) -> str:
    """What `manage.py check --deploy` reports in a fresh environment of nothing but `env`."""
    res = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, capture_output=True,
                         env=fresh_environment(tmp_path, **{**HOSTS, **env}), text=True, timeout=120)
    return res.stdout + res.stderr


def test_https_behind_a_trusted_proxy_turns_on_every_secure_setting(tmp_path):
    got = probe(tmp_path, HTTPS="true", TRUSTED_PROXY_COUNT="1")
    assert got["settings"] == {"SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True, "SECURE_SSL_REDIRECT": True,
                               "SECURE_HSTS_SECONDS": 31_536_000, "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
                               "SECURE_HSTS_PRELOAD": True,
                               "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"]}
    assert got["plain"] == [301, "https://testserver/login/"]
    assert got["proxied"] == [200, "max-age=31536000; includeSubDomains; preload", True]


def test_each_secure_setting_can_be_overridden(tmp_path):
    got = probe(tmp_path, HTTPS="true", SECURE_HSTS_SECONDS="600", SECURE_HSTS_PRELOAD="false")["settings"]
    assert got["SECURE_HSTS_SECONDS"] == 600 and got["SECURE_HSTS_PRELOAD"] is False
    # Without a trusted proxy a client's X-Forwarded-Proto is not believed.
    assert got["SECURE_PROXY_SSL_HEADER"] is None and got["SESSION_COOKIE_SECURE"] is True


def test_a_laptop_over_plain_http_gets_no_redirect_or_hsts(tmp_path):
    got = probe(tmp_path)
    assert not any(v for v in got["settings"].values())
    assert got["plain"] == [200, None] and got["proxied"][1] is None


def test_check_deploy_finds_nothing_to_say_about_https(tmp_path):
    env = {"HTTPS": "true", "TRUSTED_PROXY_COUNT": "1", "SECRET_KEY": "k" * 20 + "q" * 20 + "z7%-" * 10}
    report = check_deploy(tmp_path, **env)
    for warning in ("W004", "W005", "W008", "W012", "W016", "W021"):
        assert f"security.{warning}" not in report, report
    assert "security.W004" in check_deploy(tmp_path)  # the check does look at these settings


def test_the_kubernetes_deployment_turns_them_on(tmp_path):
    import yaml

    data = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "config.yaml").read_text())["data"]
    got = probe(tmp_path, **{**data, "ALLOWED_HOSTS": "testserver", "PFS_ROOT": str(tmp_path / "pfs"),
                             "LOGS_ROOT": str(tmp_path / "logs")})
    assert all(got["settings"].values()) and got["proxied"][1].startswith("max-age=31536000")
