"""Settings: every environment variable is read in paddleweb/settings.py, and the cache is one
Redis for every process (throttles count across processes)."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from rest_framework.test import APIRequestFactory
from rest_framework.throttling import SimpleRateThrottle

from tests.support import in_fresh_settings

ROOT = Path(__file__).resolve().parents[1]
SERVICE_PACKAGES = ("accounts", "core", "jobs", "pfs", "quotas", "legacy", "notifications", "paddleweb")
# Entry points may only name the settings module before Django starts.
SETTINGS_MODULES = {"paddleweb/settings.py", "paddleweb/test_settings.py"}


class ThreePerMinute(SimpleRateThrottle):
    scope = "probe"
    rate = "3/min"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def allowed(n: int) -> list[bool]:
    request = APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.7")
    return [ThreePerMinute().allow_request(request, None) for _ in range(n)]


def _in_other_process(code: str) -> str:
    """Run `code` in a fresh interpreter with the test settings (and this run's Redis and cache
    prefix, which test_settings put into the environment)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paddleweb.test_settings"}
    res = subprocess.run([sys.executable, "-c", f"import django\ndjango.setup()\n{code}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_a_throttle_counts_requests_across_processes(db):
    from django.core.cache import cache

    cache.delete_many([ThreePerMinute.cache_format % {"scope": "probe", "ident": "192.0.2.7"}])
    assert allowed(2) == [True, True]
    other = _in_other_process("from tests.test_settings_env import allowed\nprint(allowed(2))")
    assert other == "[True, False]"  # the other process saw this one's two requests
    assert allowed(1) == [False]


def test_pfs_limits_and_encryption_keys_come_from_the_environment(tmp_path):
    code = ("from django.conf import settings as s\nimport json\n"
            "print(json.dumps([s.PFS_MAX_CHUNK, s.PFS_UPLOAD_TTL.total_seconds(), "
            "s.PFS_RESERVATION_TTL.total_seconds(), s.FIELD_ENCRYPTION_KEYS[:2], len(s.FIELD_ENCRYPTION_KEYS)]))")
    printed = in_fresh_settings(tmp_path, code, PFS_MAX_CHUNK="1048576", PFS_UPLOAD_TTL="60",
                                PFS_RESERVATION_TTL="30", FIELD_ENCRYPTION_KEYS="new-key,old-key")
    # the two listed keys first, then the one derived from SECRET_KEY (data from before stays readable)
    assert json.loads(printed) == [1048576, 60.0, 30.0, ["new-key", "old-key"], 3]


def _reads_outside_settings(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = ast.unparse(f)
            if (name in ("os.getenv", "os.environ.get") and ast.unparse(node.args[0]) != "'PATH'") or (
                    name == "getattr" and len(node.args) == 3 and ast.unparse(node.args[0]) == "settings"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found  # PATH, passed on to child processes, is no setting


def test_no_setting_is_read_from_the_environment_or_defaulted_outside_settings():
    found = []
    for package in SERVICE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel in SETTINGS_MODULES or "/tests/" in rel or "/migrations/" in rel:
                continue
            found += _reads_outside_settings(path)
    assert found == []
