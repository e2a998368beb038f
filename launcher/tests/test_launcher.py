"""The launcher as an attacker inside the service would meet it: a real `python -m launcher`
process on a real unix socket, asked for things it must refuse."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import wait_for

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="privilege separation is what the launcher does as root")


def ask(sock: Path, **req: object) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(str(sock))
        s.sendall(json.dumps(req).encode() + b"\n")
        with s.makefile("rb") as f:
            return json.loads(f.readline())


class Launcher:
    def __init__(self, base: Path, *extra: str, service_uid: int | None = None) -> None:
        self.base = base
        self.roots = {name: base / name for name in ("pfs", "jobs", "logs", "venvs")}
        for path in self.roots.values():
            path.mkdir(parents=True, exist_ok=True)
        self.sock = base / "launcher.sock"
        self.log = base / "launcher.log"
        uid = os.geteuid() if service_uid is None else service_uid
        cmd = [sys.executable, "-m", "launcher", "--socket", str(self.sock), "--state-dir", str(base / "state"),
               "--service-uid", str(uid), "--uid-registry", str(base.parent / "uid-registry"),
               *[a for name, path in self.roots.items() for a in (f"--{name}-root", str(path))], *extra]
        self.proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[2], stdout=open(self.log, "wb"),  # noqa: SIM115 - the child's
                                     stderr=subprocess.STDOUT)

    def wait_ready(self) -> Launcher:
        wait_for(lambda: self.sock.exists() or self.proc.poll() is not None, 30, what=self.output)
        assert self.proc.poll() is None, self.output()
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture
def launcher(tmp_path):
    started = Launcher(tmp_path / "a").wait_ready()
    yield started
    started.stop()


def test_the_status_says_which_mode_and_what_is_enforced(launcher):
    answer = ask(launcher.sock, op="status")
    assert answer["ok"], answer
    assert answer["result"]["rootless"] is (not ROOT)
    assert answer["result"]["sandbox"] is None, answer  # bwrap works on this machine, either way
    assert set(answer["result"]["cgroups"]) == {"version", "enforced", "missing"}


def test_an_unknown_request_is_refused_by_name(launcher):
    answer = ask(launcher.sock, op="exec", argv=["/bin/sh"])
    assert answer == {"ok": False, "error": answer["error"]} and "unknown request" in answer["error"]


@as_root
def test_a_connection_from_another_uid_than_the_service_account_is_refused(tmp_path):
    nobody = 65534
    base = Path(tempfile.mkdtemp(prefix="launcher-"))  # pytest's own directories are root's alone
    base.chmod(0o755)
    started = Launcher(base / "a", service_uid=nobody).wait_ready()
    try:
        assert os.stat(started.sock).st_uid == nobody and os.stat(started.sock).st_mode & 0o777 == 0o600
        # Root passes the socket file's permissions; the launcher still asks the kernel who it is.
        answer = ask(started.sock, op="status")
        assert answer == {"ok": False, "error": "refused: uid 0 is not the service account"}
        # The service account itself is answered.
        code = ("import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                "s.sendall(b'{\"op\": \"status\"}\\n'); print(json.loads(s.makefile().readline())['ok'])")
        done = subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", sys.executable,
                               "-I", "-c", code, str(started.sock)], capture_output=True, text=True)
        assert done.stdout.strip() == "True", done.stderr
        assert "refused a connection from uid 0" in started.output()
    finally:
        started.stop()
        shutil.rmtree(base)


@as_root
def test_handing_a_path_outside_the_roots_or_through_a_link_to_a_job_is_refused(launcher, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "service-file").write_text("the service's")
    for path in ("/etc", str(outside), str(launcher.roots["pfs"]) + "/../outside", str(launcher.roots["pfs"])):
        answer = ask(launcher.sock, op="share", root="pfs", path=path, uid=1879048193)
        assert not answer["ok"], path
    home = launcher.roots["pfs"] / "local" / "home" / "alice"
    home.mkdir(parents=True)
    (launcher.roots["pfs"] / "local" / "home" / "swapped").symlink_to(outside)
    answer = ask(launcher.sock, op="share", root="pfs", path=str(home.parent / "swapped"), uid=1879048193)
    assert not answer["ok"] and ("symbolic links" in answer["error"] or "Not a directory" in answer["error"])
    # A directory on the way swapped for a link: the same.
    os.rename(home.parent, launcher.roots["pfs"] / "local" / "moved")
    (launcher.roots["pfs"] / "local" / "home").symlink_to(outside)
    answer = ask(launcher.sock, op="share", root="pfs", path=str(home), uid=1879048193)
    assert not answer["ok"]
    assert not os.listxattr(outside) and not os.listxattr(outside / "service-file")
    assert os.stat(outside / "service-file").st_uid == 0


@as_root
def test_a_job_uid_outside_the_range_is_refused_uid_0_above_all(launcher):
    (launcher.roots["pfs"] / "home").mkdir()
    for uid in (0, 1000, 1879048192, 1879113728, -1, "1879048193", True):
        answer = ask(launcher.sock, op="share", root="pfs", path=str(launcher.roots["pfs"] / "home"), uid=uid)
        assert not answer["ok"] and "uid: a whole number from 1879048193 to 1879113727" in answer["error"], uid
    replica = {"op": "start_replica", "job": 1, "replica": "trainer-0", "uid": 0, "argv": ["/bin/sh"]}
    answer = ask(launcher.sock, **replica)
    assert not answer["ok"] and "uid" in answer["error"]


@as_root
def test_a_range_holding_a_host_account_or_held_by_another_instance_does_not_start(tmp_path):
    nobody = Launcher(tmp_path / "nobody", "--job-uids", "65534-70000")
    assert nobody.proc.wait(30) == 2
    assert "holds uid 65534 of the host account 'nobody'" in nobody.output()

    first = Launcher(tmp_path / "first", "--job-uids", "300000-300999").wait_ready()
    try:
        second = Launcher(tmp_path / "second", "--job-uids", "300500-301999")
        assert second.proc.wait(30) == 2
        assert "overlaps 300000-300999, which another PaddleCloud on this host holds" in second.output()
        beside = Launcher(tmp_path / "beside", "--job-uids", "301000-301999").wait_ready()
        beside.stop()
    finally:
        first.stop()
    again = Launcher(tmp_path / "again", "--job-uids", "300500-301999").wait_ready()  # the range is free again
    again.stop()


def test_a_username_is_what_django_allows_and_nothing_that_could_break_the_sandboxs_passwd():
    from launcher.paths import NAME

    for name in ("alice", "alice_b", "a.b+c@d-e", "josé"):
        assert NAME.fullmatch(name), name
    for name in ("root:x:0:0", "alice\nroot", "", "a" * 151, "a/b"):
        assert not NAME.fullmatch(name), name
