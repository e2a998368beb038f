"""Hard links the service or a job leaves where the launcher (root) writes or hands files over.

Where fs.protected_hardlinks is 0 anyone may hard-link a file they cannot write (/etc/passwd)
into a directory of their own; root may always, so each test makes such a link itself and shows
the launcher's own checks refuse it. Those checks are not airtight against a job that may link
the file and removes its link in the tree after the launcher opened it (its one link left is
then /etc/passwd's), so the launcher also refuses to start as root unless the setting is 1."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from launcher import ownership
from launcher.ops import Launcher, Setup
from launcher.paths import Refused, Roots
from launcher.tests.test_hostile_requests import replica
from launcher.tests.test_launcher import Launcher as LauncherProcess
from launcher.tests.test_launcher import ask
from tests.support import ROOT, wait_for

pytestmark = pytest.mark.skipif(not ROOT, reason="a hard link hands nothing over to a launcher without root")
NOBODY = 65534
JOB_UID = 300001


def root_file(tmp_path: Path, text: str = "root:x:0:0:root:/root:/bin/bash\n") -> Path:
    """/etc/passwd's stand-in: root's, on the same filesystem as the roots (links cannot cross one)."""
    outside = tmp_path / "etc-passwd"
    outside.write_text(text)
    outside.chmod(0o644)
    return outside


def in_process(tmp_path: Path, service_uid: int = NOBODY) -> Launcher:
    for name in ("pfs/local/home/alice", "pfs/local/public", "jobs/j1/trainer-0/state", "jobs/j1/trainer-0/work",
                 "jobs/j1/trainer-0/tmp", "logs", "venvs/v1/bin"):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    roots = Roots(**{name: str(tmp_path / name) for name in ("pfs", "jobs", "logs", "venvs")})
    return Launcher(Setup(roots, tmp_path / "state", service_uid, range(300000, 300101), rootless=False))


# --- logs ------------------------------------------------------------------------------------------
def test_a_log_hard_linked_to_a_root_file_gets_no_replicas_output(tmp_path):
    """Through a real launcher: the replica would run with the link as its stdout, as root."""
    outside = root_file(tmp_path)
    launcher = LauncherProcess(tmp_path / "a", "--job-uids", "300000-300999").wait_ready()
    base = launcher.base
    try:
        for name in ("pfs/local/home/alice", "pfs/local/public", "jobs/j1/trainer-0/state",
                     "jobs/j1/trainer-0/work", "jobs/j1/trainer-0/tmp", "venvs/v1/bin"):
            (base / name).mkdir(parents=True, exist_ok=True)
        os.link(outside, base / "logs" / "j1.log")
        req = replica(base, job=910101, argv=["/bin/echo", "appended by a replica"])
        answer = ask(launcher.sock, **req)
        if answer["ok"]:  # the old launcher: wait for the replica to have written, to show it
            wait_for(lambda: (base / "jobs/j1/trainer-0/state/exit.json").exists(), 60)
        assert outside.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
        assert not answer["ok"] and "not a regular file of one link" in answer["error"], answer
    finally:
        ask(launcher.sock, op="release_job", job=910101, replicas=["trainer-0"])
        launcher.stop()


def test_the_keepers_state_files_replace_what_the_service_left_at_their_temporary_names(tmp_path):
    """The state directory is the service's: a FIFO at keeper.pid.tmp would hold the keeper (and
    its replica) before it starts, a link to a root file at exit.json.tmp would be emptied and
    written as root."""
    outside = root_file(tmp_path)
    launcher = LauncherProcess(tmp_path / "a", "--job-uids", "300000-300999").wait_ready()
    base, state = launcher.base, launcher.base / "jobs/j1/trainer-0/state"
    try:
        for name in ("pfs/local/home/alice", "pfs/local/public", "jobs/j1/trainer-0/state",
                     "jobs/j1/trainer-0/work", "jobs/j1/trainer-0/tmp", "venvs/v1/bin"):
            (base / name).mkdir(parents=True, exist_ok=True)
        os.mkfifo(state / "keeper.pid.tmp")
        os.link(outside, state / "exit.json.tmp")
        answer = ask(launcher.sock, **replica(base, job=910102, argv=["/bin/echo", "ran"]))
        assert answer["ok"], answer
        result = wait_for(lambda: (state / "exit.json").exists() and json.loads((state / "exit.json").read_text()),
                          60, what="the replica's exit")
        assert result["exit_code"] == 0, result
        assert outside.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
        assert int((state / "keeper.pid").read_text()) > 0
    finally:
        ask(launcher.sock, op="release_job", job=910102, replicas=["trainer-0"])
        launcher.stop()


def test_a_log_not_the_service_accounts_is_refused_and_a_missing_one_made_its(tmp_path):
    launcher = in_process(tmp_path)
    log = tmp_path / "logs" / "j1.log"
    log.write_text("root's\n")  # one link, but root's: the service renamed it in from elsewhere
    with pytest.raises(Refused, match="not the service account's"):
        launcher.handle(replica(tmp_path, work="/nowhere"))
    assert log.read_text() == "root's\n"
    log.unlink()
    with pytest.raises(Refused, match="/nowhere"):  # the log was accepted: the next check refuses
        launcher.handle(replica(tmp_path, work="/nowhere"))
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (NOBODY, 0o640)  # the service reads it
    with pytest.raises(Refused, match="/nowhere"):  # and it is accepted again
        launcher.handle(replica(tmp_path, work="/nowhere"))


def test_a_keepers_pid_file_hard_linked_or_not_the_launchers_is_not_read(tmp_path):
    """Read as root, its number would be quoted back in the refusal ("pid 1 is not the keeper")."""
    launcher = in_process(tmp_path)
    state = tmp_path / "jobs/j1/trainer-0/state"
    os.link(root_file(tmp_path, "1\n"), state / "keeper.pid")
    assert launcher.handle({"op": "stop_replica", "state": str(state)}) is False
    (state / "keeper.pid").unlink()
    (state / "keeper.pid").write_text("1\n")
    os.chown(state / "keeper.pid", NOBODY, NOBODY)  # the service's, not the keeper's
    assert launcher.handle({"op": "stop_replica", "state": str(state)}) is False


# --- ownership: a name swapped between a look at it and the change -------------------------------
def swap_after_a_look(monkeypatch, victim: Path, link_to: Path) -> list[bool]:
    """The moment the launcher has stat'ed `victim` (by name or descriptor), its name becomes a
    hard link to `link_to`: what a job renaming in a loop beside the walk achieves, made certain."""
    ino, swapped = victim.stat().st_ino, []
    staged = victim.with_name(".staged")
    os.link(link_to, staged)
    real_stat, real_fstat = os.stat, os.fstat

    def after(st: os.stat_result) -> os.stat_result:
        if st.st_ino == ino and not swapped:
            swapped.append(True)
            os.rename(staged, victim)
        return st

    monkeypatch.setattr(os, "stat", lambda *a, **k: after(real_stat(*a, **k)))
    monkeypatch.setattr(os, "fstat", lambda fd: after(real_fstat(fd)))
    return swapped


def test_give_changes_the_file_it_looked_at_never_the_one_swapped_in(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "lib.py").write_text("the build's")
    os.chown(venv / "lib.py", JOB_UID, JOB_UID)
    outside = root_file(tmp_path)
    swapped = swap_after_a_look(monkeypatch, venv / "lib.py", outside)
    fd = os.open(venv, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ownership.give(fd, NOBODY)
    finally:
        os.close(fd)
    monkeypatch.undo()
    assert swapped and (venv / "lib.py").stat().st_ino == outside.stat().st_ino
    assert outside.stat().st_uid == 0


def test_share_changes_the_file_it_looked_at_never_the_one_swapped_in(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes").write_text("alice's")
    outside = root_file(tmp_path)
    swapped = swap_after_a_look(monkeypatch, home / "notes", outside)
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ownership.share(fd, JOB_UID, os.geteuid())
    finally:
        os.close(fd)
    monkeypatch.undo()
    assert swapped
    assert os.listxattr(outside) == []  # no ACL entry handing it to the job uid


def test_release_build_and_share_leave_a_root_file_hard_linked_into_the_tree_alone(tmp_path):
    """Through a real launcher, the service account asking (root is refused as it)."""
    base = Path(tempfile.mkdtemp(prefix="launcher-"))  # pytest's own directories are root's alone
    base.chmod(0o755)
    outside = root_file(base)
    launcher = LauncherProcess(base / "a", "--job-uids", "300000-300999", service_uid=NOBODY).wait_ready()
    try:
        venv, home = launcher.roots["venvs"] / "v1", launcher.roots["pfs"] / "home"
        for top in (venv, home):
            top.mkdir()
            os.link(outside, top / "linked")
        (venv / "lib.py").write_text("the build's")
        os.chown(venv / "lib.py", 300000, 300000)
        assert ask_as(launcher, NOBODY, op="release_build", venv=str(venv)) == {"ok": True, "result": None}
        assert ask_as(launcher, NOBODY, op="share", root="pfs", path=str(home), uid=300001)["ok"]
        assert (venv / "lib.py").stat().st_uid == NOBODY  # what is the build's is handed back
        assert outside.stat().st_uid == 0 and os.listxattr(outside) == []
    finally:
        launcher.stop()
        shutil.rmtree(base)


def ask_as(launcher: LauncherProcess, as_uid: int, **req: object) -> dict:
    """`ask`, from the uid `as_uid` (the service account the launcher serves)."""
    code = ("import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "s.sendall(sys.argv[2].encode() + b'\\n'); print(s.makefile().readline())")
    done = subprocess.run(["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", sys.executable, "-I",
                           "-c", code, str(launcher.sock), json.dumps(req)], capture_output=True, text=True)
    return json.loads(done.stdout) if done.stdout.strip() else {"error": done.stderr}


# --- at start --------------------------------------------------------------------------------------
def test_the_launcher_does_not_start_as_root_where_anyone_may_hard_link_any_file(tmp_path, monkeypatch, caplog):
    import launcher.__main__ as main

    setting = tmp_path / "protected_hardlinks"
    setting.write_text("0\n")
    monkeypatch.setattr(main, "PROTECTED_HARDLINKS", setting)
    args = ["--socket", str(tmp_path / "s"), "--state-dir", str(tmp_path / "state"),
            "--uid-registry", str(tmp_path / "registry"),
            *[a for name in ("pfs", "jobs", "logs", "venvs") for a in (f"--{name}-root", str(tmp_path / name))]]
    with caplog.at_level(logging.ERROR, logger="launcher"):
        assert main.main(args) == 2
    assert "protected_hardlinks is 0, not 1" in caplog.text
    assert not (tmp_path / "registry").exists() and not (tmp_path / "state").exists()  # refused first


def test_the_launcher_does_not_start_as_root_with_a_state_directory_others_may_write(tmp_path):
    (tmp_path / "a" / "state").mkdir(parents=True)
    (tmp_path / "a" / "state").chmod(0o777)
    started = LauncherProcess(tmp_path / "a", "--job-uids", "300000-300999")
    try:
        assert started.proc.wait(30) == 2
    finally:
        if started.proc.poll() is None:  # it started after all: not left running
            started.stop()
    assert "not a directory of root's that only root may write" in started.output()
