"""What a command line imports: each command pays at its start only for the libraries it uses
(bench/cli_start.py times them). Every module a `python -m paddlectl ...` process imported is
read at its exit, so nothing the command did escapes the count: help without httpx, tenacity,
rich or yaml; rich for a table, not for a command that prints plain lines; yaml for a config
file, not for a command configured by the environment; websockets for `logs -f` alone; never
httpx's own command line (click, pygments)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import CLIENT_DIR, write_config

# At the process's exit, every module imported (by name) into the file named by argv[1].
PROBE = """
import atexit, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(k for k, v in sys.modules.items() if v is not None)))
runpy.run_module("paddlectl", run_name="__main__", alter_sys=True)
"""
NEVER = {"httpx._main", "click", "pygments"}  # httpx's command line


def imported(tmp_path, *argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules `paddlectl ARGV` imported, as a process of its own with stdout and stderr
    piped (no terminal: no progress bar)."""
    out = tmp_path / "modules.txt"
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(CLIENT_DIR)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], env=full, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    modules = set(out.read_text().split())
    return modules | {m.split(".")[0] for m in modules}


@pytest.fixture
def user_env(server, alice, clean_env):
    """alice configured by the environment alone, as in CI: no config file to read."""
    from accounts.services import issue_token

    return {"PADDLECTL_ENDPOINT": server, "PADDLECTL_TOKEN": issue_token(alice), "PADDLECTL_USERNAME": "alice"}


HOME = "/pfs/local/home/alice"
live = pytest.mark.django_db(transaction=True)  # the live server reads what the test writes


def test_help_imports_no_http_client_output_or_config_library(tmp_path):
    for argv in (["--help"], ["cp", "--help"], ["help", "submit"], ["commands"]):
        modules = imported(tmp_path, *argv)
        assert not modules & {"httpx", "httpcore", "tenacity", "rich", "yaml", "websockets", *NEVER}, argv


@live
def test_a_table_imports_rich_and_plain_lines_do_not(tmp_path, user_env):
    modules = imported(tmp_path, "ls", HOME, env=user_env)
    assert "rich.table" in modules and "httpx" in modules
    assert not modules & {"yaml", "websockets", "rich.progress", *NEVER}
    (tmp_path / "small.txt").write_text("hello\n")
    (tmp_path / "big.bin").write_bytes(os.urandom(5 << 20))  # the resumable upload, by sendfile
    for argv in (["cp", str(tmp_path / "small.txt"), f"{HOME}/small.txt"],
                 ["cp", str(tmp_path / "big.bin"), f"{HOME}/big.bin"],
                 ["cp", f"{HOME}/big.bin", str(tmp_path / "back.bin")],
                 ["mkdir", f"{HOME}/d"]):
        modules = imported(tmp_path, *argv, env=user_env)
        # Off a terminal the progress is two lines, no bar: rich's console prints them, no more.
        assert not modules & {"yaml", "websockets", "rich.progress", "rich.table", *NEVER}, argv
    assert (tmp_path / "back.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()


@live
def test_logs_import_websockets_only_to_follow(tmp_path, user_env, alice):
    from tests.support import make_package

    from jobs.models import Job
    from jobs.services import submit_job

    job = submit_job(alice, {"name": "done", "package": make_package(alice, "pkg", {"train.py": ""}),
                             "entry": "python train.py", "mode": "collective", "trainers": 1})
    Job.objects.filter(pk=job.pk).update(state="Succeeded")
    job.replicas.update(state="Succeeded")
    modules = imported(tmp_path, "logs", "done", env=user_env)
    assert not modules & {"websockets", "rich", "yaml", *NEVER}
    modules = imported(tmp_path, "get", "jobs", "-a", env=user_env)
    assert "rich.table" in modules and not modules & {"websockets", "yaml", *NEVER}
    assert "websockets" in imported(tmp_path, "logs", "-f", "done", env=user_env)


@live
def test_submit_imports_no_table_websockets_or_yaml(tmp_path, user_env, alice, datacenter):
    from tests.support import make_package

    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=1 << 40, max_running_jobs=50)
    package = make_package(alice, "pkg", {"train.py": "print('hi')\n"})
    modules = imported(tmp_path, "submit", "-jobname", "quick", "-fail-fast", package, env=user_env)
    assert not modules & {"websockets", "rich", "yaml", *NEVER}


@live
def test_a_config_file_is_read_with_yaml(tmp_path, server, alice, clean_env):
    write_config(clean_env / ".paddle" / "config", f"datacenters:\n- name: local\n  username: alice\n"
                 f"  password: password\n  endpoint: {server}\n")
    assert "yaml" in imported(tmp_path, "ls", HOME, env={"HOME": str(clean_env)})


def test_importing_the_sdk_leaves_httpx_command_line_out(tmp_path):
    code = ("import sys; import paddlectl.api, httpx; print(sorted(m for m in ('httpx._main', 'click', 'pygments', "
            "'rich') if m in sys.modules)); import httpx._main; print(callable(httpx._main.main))")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(CLIENT_DIR)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True"]  # and it can still be imported on purpose


def test_every_module_imports_httpx_through_the_one_that_leaves_its_command_line_out():
    import ast

    found = []
    for path in sorted((CLIENT_DIR / "paddlectl").rglob("*.py")):
        if path.name == "_httpx.py":
            continue
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if id(node) not in typing_only and any(n.split(".")[0] == "httpx" for n in names):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
