"""A job's network namespace as root: made once, loopback up, and up again when made anew."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from launcher import netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="named namespaces: root, ip")


def _loopback_up(ns: str) -> bool:
    done = subprocess.run(["ip", "-n", ns, "-o", "link", "show", "lo"], capture_output=True, text=True, check=True)
    return ",UP" in done.stdout


@pytest.fixture
def ns(tmp_path):
    name = f"pc-test-{os.getpid()}"
    yield name
    netns.remove(tmp_path, name)


def test_loopback_is_brought_up_once_per_namespace_and_again_for_a_new_one(ns, tmp_path, monkeypatch):
    first = netns.ensure(tmp_path, ns)
    first.close()
    assert _loopback_up(ns)
    # The job's next replicas: nothing more to run (no `ip` to be found would fail otherwise).
    with monkeypatch.context() as m:
        m.setenv("PATH", str(tmp_path))
        netns.ensure(tmp_path, ns).close()
    netns.remove(tmp_path, ns)
    assert not (netns.NETNS_DIR / ns).exists()
    netns.ensure(tmp_path, ns).close()
    assert _loopback_up(ns)
