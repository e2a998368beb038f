"""The three executables the client package installs, resolved from pyproject.toml as pip would,
and the promise that it ships no top-level `paddle` module (which would shadow PaddlePaddle)."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys

import pytest

from .conftest import CLIENT_DIR

tomllib = pytest.importorskip("tomllib")
PROJECT = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())


@pytest.mark.parametrize("name, shows", [
    ("paddlectl", "Usage: paddlectl <flags> <subcommand>"),
    ("paddlecloud", "Usage: paddlecloud <flags> <subcommand>"),
    ("paddle", "paddle job submit --job-name=NAME"),
])
def test_each_console_script_runs_its_command_line(name, shows, clean_env):
    # as the script pip writes does it
    module, func = PROJECT["project"]["scripts"][name].split(":")
    env = {**os.environ, "PYTHONPATH": str(CLIENT_DIR)}
    proc = subprocess.run([sys.executable, "-c", f"from {module} import {func}; {func}()", "--help"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert shows in proc.stdout


def test_no_top_level_paddle_module_is_shipped():
    patterns = PROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch.fnmatch("paddle", p) or fnmatch.fnmatch("paddle.job", p) for p in patterns)
    assert not (CLIENT_DIR / "paddle").exists() and not (CLIENT_DIR / "paddle.py").exists()


def test_paddle_runs_as_a_module_when_another_paddle_owns_the_executable(clean_env):
    env = {**os.environ, "PYTHONPATH": str(CLIENT_DIR)}
    proc = subprocess.run([sys.executable, "-m", "paddlectl.cli.paddle", "mpi"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 1 and "datacenters' backends" in proc.stderr
