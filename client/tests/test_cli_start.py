"""What a command line imports: each command pays at its start only for the libraries it uses
(bench/cli_start.py times them). Every module a `python -m paddlectl ...` process imported is
read at its exit, so nothing the command did escapes the count: help without httpx, tenacity,
rich or yaml; no rich for a table or plain lines (rich draws progress bars on a terminal); no
tenacity for a request that succeeds; yaml for a config file, not for a command configured by
the environment; websockets for `logs -f` alone; never httpx's own command line (click, pygments).
Also the HTTP client of a plain-http endpoint, which loads no CA bundle, and what a request
elsewhere gets instead."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
def test_tables_and_plain_lines_import_no_rich_and_no_retries(tmp_path, user_env):
    modules = imported(tmp_path, "ls", HOME, env=user_env)
    assert "httpx" in modules
    assert not modules & {"rich", "tenacity", "yaml", "websockets", *NEVER}
    (tmp_path / "small.txt").write_text("hello\n")
    (tmp_path / "big.bin").write_bytes(os.urandom(5 << 20))  # the resumable upload, by sendfile
    for argv in (["cp", str(tmp_path / "small.txt"), f"{HOME}/small.txt"],
                 ["cp", str(tmp_path / "big.bin"), f"{HOME}/big.bin"],
                 ["cp", f"{HOME}/big.bin", str(tmp_path / "back.bin")],
                 ["mkdir", f"{HOME}/d"]):
        modules = imported(tmp_path, *argv, env=user_env)
        # Off a terminal the progress is two plain lines, no bar.
        assert not modules & {"yaml", "websockets", "rich", "tenacity", *NEVER}, argv
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
    assert not modules & {"websockets", "rich", "tenacity", "yaml", *NEVER}
    assert "websockets" in imported(tmp_path, "logs", "-f", "done", env=user_env)


@live
def test_submit_imports_no_table_websockets_or_yaml(tmp_path, user_env, alice, datacenter):
    from tests.support import make_package

    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=1 << 40, max_running_jobs=50)
    package = make_package(alice, "pkg", {"train.py": "print('hi')\n"})
    modules = imported(tmp_path, "submit", "-jobname", "quick", "-fail-fast", package, env=user_env)
    assert not modules & {"websockets", "rich", "tenacity", "yaml", *NEVER}


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


# --- the plain-http client's TLS --------------------------------------------------------------
@pytest.fixture
def ca_loads(monkeypatch):
    """Calls that load CA certificates into a context (httpx's verify=True does, with certifi's)."""
    calls: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def spy(self, *args, **kwargs):
        calls.append(args or kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", spy)
    return calls


def test_a_plain_http_endpoint_loads_no_ca_bundle_unless_a_proxy_is_on_the_way(ca_loads, monkeypatch):
    from paddlectl.api import API

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    API("http://127.0.0.1:1").close()
    assert ca_loads == []
    API("https://127.0.0.1:1").close()
    assert len(ca_loads) == 1
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:2")  # the proxy could be told to use TLS
    API("http://127.0.0.1:1").close()
    assert len(ca_loads) > 1


def _serve(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _json_handler(pages: dict[str, object]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(pages[self.path.split("?")[0]]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def test_a_next_link_to_another_origin_is_fetched_with_verified_tls(tmp_path, monkeypatch):
    """The plain endpoint's client trusts no CA; a page elsewhere, over https, goes through a
    client made as for any endpoint: it verifies the server (here against SSL_CERT_FILE, which
    httpx reads as it always did), and refuses one it cannot verify."""
    from paddlectl.api import API
    from paddlectl.errors import ConnectionFailed

    from .tls_proxy import CertAuthority

    ca = CertAuthority(tmp_path / "ca")
    cert, key = ca.issue("localhost", server=True)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    elsewhere = _serve(_json_handler({"/page2/": {"results": [3, 4], "next": None}}), tls)
    first = {"results": [1, 2], "next": f"https://localhost:{elsewhere.server_address[1]}/page2/"}
    plain = _serve(_json_handler({"/api/v2/things/": first}))
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))
        with API(f"http://127.0.0.1:{plain.server_address[1]}", retries=0) as api:
            assert api.plain
            assert list(api.paginate("things/")) == [1, 2, 3, 4]
        monkeypatch.delenv("SSL_CERT_FILE")
        with API(f"http://127.0.0.1:{plain.server_address[1]}", retries=0) as api, \
                pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED"):
            list(api.paginate("things/"))
    finally:
        plain.shutdown()
        elsewhere.shutdown()


@pytest.mark.parametrize("argv", [
    ["ls"], ["ls", "-r", "/pfs/local/home/alice"], ["-o", "json", "get", "jobs", "-a"], ["get", "-o", "wide", "jobs"],
    ["-config", "ls", "get", "jobs"],  # a flag's value that names a command: the guess is wrong
    ["-datacenter", "cp", "cp", "a", "/pfs/x"], ["--output=yaml", "logs", "-f", "job"], ["-config", "ls"],
    ["submit", "-jobname", "ls", "-env", "A=1", "-e", "B=2", "pkg"], ["pfs-less", "ls"], ["-version"], [],
    ["submit", "--output", "out/dir", "pkg"], ["logs", "--no-prefix", "job"], ["help", "cp"],
])
def test_parsing_with_the_one_subcommand_named_reads_as_the_whole_parser(argv):
    """What main() parses, by the parser made for the subcommand it guessed, is what the whole
    parser makes of the same words, or the same error."""
    from paddlectl.cli.base import UsageError
    from paddlectl.cli.main import _parse, build_parser

    def parsed(parse):
        try:
            return vars(parse())
        except UsageError as e:
            return str(e)

    whole = parsed(lambda: build_parser()[0].parse_args(argv))
    assert parsed(lambda: _parse(list(argv), "paddlectl")[0]) == whole
    assert isinstance(whole, str) == (argv == ["pfs-less", "ls"])  # every case parses but that one
