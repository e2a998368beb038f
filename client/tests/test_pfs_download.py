"""Downloads: streamed to disk as the connection reads them, progress in steps rather than per
network read, and the file's own bytes only (no content encoding). Resuming is covered in
test_cli_files.py; speed in bench/pfs_download.py."""

from __future__ import annotations

import gzip
import io
import os
import re
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from paddlectl import pfs
from paddlectl.errors import PaddlectlError

from .conftest import put_files, run_cli

HOME = "/pfs/local/home/alice"


@pytest.mark.django_db(transaction=True)
def test_a_download_arrives_whole_with_progress_in_steps_of_a_few_mib(live_server, alice, tmp_path):
    from accounts.services import issue_token
    from paddlectl import Client

    data = os.urandom(20 << 20)
    put_files(alice, {"weights.bin": data})
    seen: list[tuple[int, int]] = []
    with Client(live_server.url, token=issue_token(alice), username="alice") as client:
        started = time.monotonic()
        client.storage.download_file(f"{HOME}/weights.bin", tmp_path / "weights.bin",
                                     progress=lambda done, total: seen.append((done, total)))
        elapsed = time.monotonic() - started
    assert (tmp_path / "weights.bin").read_bytes() == data
    assert not list(tmp_path.glob("weights.bin.part*"))
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1] == (len(data), len(data)) and done[0] == 0
    # every REPORT_INTERVAL seconds and at the end, not once per network read (~320 of them here)
    assert len(seen) <= elapsed / pfs.REPORT_INTERVAL + 3


class _GzipServer(BaseHTTPRequestHandler):
    """A server that compresses the file although the client asks for identity."""

    requests: list[dict[str, str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(dict(self.headers))
        body = gzip.compress(b"the file's bytes" * 100)
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_download_asks_for_the_files_own_bytes_and_refuses_an_encoded_answer(tmp_path):
    from paddlectl import Client

    server = ThreadingHTTPServer(("127.0.0.1", 0), _GzipServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{server.server_port}", token="t", username="alice") as client, \
                pytest.raises(PaddlectlError, match="sent it encoded"):
            client.storage.download_file(f"{HOME}/f.bin", tmp_path / "f.bin", size=1600)
    finally:
        server.shutdown()
        server.server_close()
    assert _GzipServer.requests[0]["Accept-Encoding"] == "identity"
    assert not (tmp_path / "f.bin").exists()


class _Terminal(io.StringIO):
    """stderr as a terminal: where rich draws the bar and not the plain start/end lines."""

    def isatty(self) -> bool:
        return True


@pytest.mark.django_db(transaction=True)
def test_paddlectl_cp_draws_its_download_bar_to_the_end(config, alice, tmp_path, monkeypatch):
    from paddlectl.cli.main import main

    data = os.urandom(10 << 20)
    put_files(alice, {"weights.bin": data})
    plain = run_cli("cp", f"{HOME}/weights.bin", tmp_path / "plain.bin")
    assert plain.code == 0, plain.err
    assert f"Downloading {HOME}/weights.bin ({len(data)} bytes) ..." in plain.err and "... Done" in plain.err
    err = _Terminal()
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "200")
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        assert main(["cp", f"{HOME}/weights.bin", str(tmp_path / "bar.bin")]) == 0
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err.getvalue())
    assert "10.5/10.5 MB" in drawn, drawn  # rich's DownloadColumn at the end: every byte counted
    assert (tmp_path / "plain.bin").read_bytes() == data == (tmp_path / "bar.bin").read_bytes()
