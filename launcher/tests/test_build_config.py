"""Which pip settings reach a runtime build. The root launcher reads the host's pip configuration
and hands it to the build sandbox (PIP_* variables, its local paths bound read-only), so it must
come from files only root controls: `make run` starts the launcher with HOME set to the service's
state directory, where the service account could write a pip.conf of its own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from launcher import sandbox
from launcher.paths import Refused
from launcher.tests.test_launcher import ask
from tests.support import ROOT, LauncherProcess, wait_for

SERVICE = 65534  # stands for the service account: `make run` hands it the state directory
as_root = pytest.mark.skipif(not ROOT, reason="the root launcher is what must not take the service's settings")


def wheel(directory: Path, name: str) -> Path:
    """A minimal pure-Python wheel of `name` 0.1."""
    files = {f"{name}/__init__.py": "", f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
             "Version: 0.1\n", f"{name}-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
             "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    digest = {path: base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
              for path, text in files.items()}
    record = "".join(f"{path},sha256={digest[path]},{len(text)}\n" for path, text in files.items())
    record += f"{name}-0.1.dist-info/RECORD,,\n"
    path = directory / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{name}-0.1.dist-info/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def plant(home: Path, settings: str, owner: int | None = None) -> Path:
    """A pip.conf where pip looks for a user's own: HOME/.config/pip/pip.conf."""
    conf = home / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"[global]\n{settings}\n")
    if owner is not None:
        for path in (home, home / ".config", conf.parent, conf):
            os.chown(path, owner, owner)
    return conf


@pytest.fixture
def pip_env(monkeypatch):
    """This process's environment as the launcher's: no PIP_* of the test run's own (they would
    override any file's), HOME and PIP_CONFIG_FILE as each test sets them."""
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_a_pip_conf_in_the_home_the_launcher_was_started_with_is_not_read(tmp_path, pip_env):
    service_home = tmp_path / "var"
    wheels = service_home / "wheels"
    wheels.mkdir(parents=True)
    plant(service_home, f"find-links = {wheels}\nindex-url = http://planted.invalid/simple")
    pip_env.setenv("HOME", str(service_home))
    env = sandbox.pip_environment()
    assert str(wheels) not in env.values() and "http://planted.invalid/simple" not in env.values(), env


def test_the_operators_own_pip_conf_still_reaches_builds(tmp_path, pip_env):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nfind-links = {wheels}\nextra-index-url = file://{tmp_path}/simple\n"
                    "[install]\nno-binary = :none:\n")
    pip_env.setenv("PIP_CONFIG_FILE", str(conf))
    env = sandbox.pip_environment()
    assert env["PIP_FIND_LINKS"] == str(wheels) and env["PIP_NO_BINARY"] == ":none:", env
    bound = sandbox.local_paths(list(env.values()))
    assert str(wheels) in bound and str(tmp_path) in bound, bound


def test_a_pip_conf_another_account_can_change_refuses_the_build(tmp_path, pip_env):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may swap the file in it
    conf = shared / "pip.conf"
    conf.write_text("[global]\nfind-links = /\n")
    pip_env.setenv("PIP_CONFIG_FILE", str(conf))
    with pytest.raises(Refused, match=re.escape(f"pip reads {conf}, which another account than root can change")):
        sandbox.pip_environment()
    if ROOT:  # the file itself another account's
        shared.chmod(0o755)
        os.chown(conf, SERVICE, SERVICE)
        with pytest.raises(Refused, match=re.escape(f"can change ({conf})")):
            sandbox.pip_environment()


def test_only_paths_no_other_account_can_change_are_bound(tmp_path):
    kept = tmp_path / "wheels"
    kept.mkdir()
    (kept / "constraints.txt").write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "wheels").mkdir()
    sticky = tmp_path / "sticky"  # like /tmp: writable, but no one may swap another's entry
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "wheels").mkdir()
    (tmp_path / "link").symlink_to(shared / "wheels")
    (tmp_path / "index" / "simple").mkdir(parents=True)
    values = [f"{kept} {kept}/constraints.txt", str(shared / "wheels"), str(shared), str(tmp_path / "link"),
              f"{kept}/../shared/wheels", str(sticky / "wheels"), str(sticky), f"file://{tmp_path}/index/simple"]
    if ROOT:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, SERVICE, SERVICE)
        values.append(str(theirs))
    assert sandbox.local_paths(values) == [str(kept), f"{kept}/constraints.txt", str(sticky / "wheels"),
                                           str(tmp_path / "index")]


@as_root
def test_a_build_installs_from_the_operators_settings_never_from_the_services(pip_env):
    """A real root launcher started as `make run` starts it (HOME the service's directory) and two
    real sandboxed builds: what the operator's settings name is installed; what a pip.conf the
    service planted in that HOME names is not. (The operator's come from a variable here: with
    PIP_CONFIG_FILE set, pip reads no user's file at all.)"""
    base = Path(tempfile.mkdtemp(prefix="launcher-build-"))
    base.chmod(0o755)
    try:
        operators = base / "operator-wheels"
        operators.mkdir()
        wheel(operators, "operatorpkg")
        home = base / "var"  # the service's state directory, and so its HOME too
        planted = home / "planted-index" / "simple" / "plantedpkg"
        planted.mkdir(parents=True)
        wheel(planted.parent.parent, "plantedpkg")
        (planted / "index.html").write_text('<a href="../../plantedpkg-0.1-py3-none-any.whl">plantedpkg</a>\n')
        plant(home, f"extra-index-url = file://{home}/planted-index/simple")
        subprocess.run(["chown", "-R", f"{SERVICE}:{SERVICE}", str(home)], check=True)
        roots = {name: base / name for name in ("pfs", "jobs", "logs", "venvs")}
        for path in roots.values():
            path.mkdir()
        launcher = LauncherProcess(base / "launcher", roots,
                                   env={"HOME": str(home), "PIP_FIND_LINKS": str(operators)}).ready()
        try:
            venv = roots["venvs"] / "env"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            assert build(launcher, venv, "operatorpkg") == 0, (venv.parent / "env.log").read_text()
            assert build(launcher, venv, "plantedpkg") != 0, "the service's pip.conf reached the build"
            assert "No matching distribution found for plantedpkg" in (venv.parent / "env.log").read_text()
            site = next(venv.glob("lib/python*/site-packages"))
            assert (site / "operatorpkg").is_dir() and not (site / "plantedpkg").exists()
        finally:
            launcher.stop()
    finally:
        shutil.rmtree(base)


def build(launcher: LauncherProcess, venv: Path, requirement: str) -> int:
    """One runtime build of `requirement` into `venv`, as the service asks for one; its exit code."""
    (venv / "requirements.txt").write_text(f"{requirement}\n")
    state = venv.parent / "env.state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    # An index that answers nothing at once: neither run should wait on PyPI.
    answer = ask(launcher.sock, op="start_build", venv=str(venv), state=str(state), log=str(venv.parent / "env.log"),
                 index_url="file:///nonexistent/simple")
    try:
        assert answer["ok"], answer
        done = wait_for(lambda: (state / "exit.json").exists() and (state / "exit.json").read_text(), 120,
                        what=lambda: (venv.parent / "env.log").read_text())
        return int(json.loads(done)["exit_code"])
    finally:
        assert ask(launcher.sock, op="release_build", venv=str(venv))["ok"]
