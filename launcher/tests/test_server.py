"""The launcher's socket, in process: when its name appears, connections to it are taken."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import pytest

from launcher import server as server_module
from launcher.server import Server


def test_the_socket_appears_under_its_name_only_once_it_listens(tmp_path, monkeypatch):
    path = tmp_path / "launcher.sock"
    seen_before_listening, bound_in = [], []
    activate = Server.server_activate

    def watched(self):
        seen_before_listening.append(path.exists())
        # Bound (and chowned, next) in a directory nobody else can write: in the socket's own
        # directory, the service's, the name could be swapped for a link to a root file meanwhile.
        where = os.stat(os.path.dirname(self.server_address))
        bound_in.append((where.st_uid, where.st_mode & 0o777))
        activate(self)

    monkeypatch.setattr(Server, "server_activate", watched)
    server = Server(str(path), launcher=None, service_uid=os.geteuid())
    try:
        assert seen_before_listening == [False]
        assert bound_in == [(os.geteuid(), 0o700)]
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))  # taken at once: listening, though nothing serves yet
        assert sorted(p.name for p in tmp_path.iterdir()) == ["launcher.sock"]
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        server.server_close()


def test_a_stale_socket_is_replaced_and_a_link_there_never_followed(tmp_path):
    path = tmp_path / "launcher.sock"
    (tmp_path / "elsewhere").write_text("kept")
    path.symlink_to(tmp_path / "elsewhere")
    server = Server(str(path), launcher=None, service_uid=os.geteuid())
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "launcher.sock"]
        assert (tmp_path / "elsewhere").read_text() == "kept"
    finally:
        server.server_close()


class Echo:
    def handle(self, req: dict) -> object:
        return req.get("op")


@pytest.fixture
def serving(tmp_path, monkeypatch):
    monkeypatch.setattr(server_module, "TIMEOUT", 1.0)
    monkeypatch.setattr(server_module, "MAX_HANDLERS", 2)
    server = Server(str(tmp_path / "launcher.sock"), launcher=Echo(), service_uid=os.geteuid())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield tmp_path / "launcher.sock"
    server.shutdown()
    server.server_close()
    thread.join(10)


def connect(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(str(path))
    return s


def test_a_request_that_trickles_in_is_refused_at_the_deadline_not_per_read(serving):
    with connect(serving) as s:
        answer = b""
        s.settimeout(0.2)
        deadline = time.monotonic() + 20
        while b"\n" not in answer and time.monotonic() < deadline:
            # A byte each 0.2 s: each read is well within its second. Once answered and closed,
            # the send fails and the answer waits to be read.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.send(b" ")
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                break
            answer += chunk
        assert b"not sent within 1 s" in answer, answer


def test_requests_beyond_the_handlers_wait_for_one_to_end(serving, monkeypatch):
    monkeypatch.setattr(server_module, "TIMEOUT", 120.0)  # the held ones stay held, however busy the machine
    held = [connect(serving), connect(serving)]  # two handlers, each waiting for its request
    with connect(serving) as third:
        third.sendall(b'{"op": "status"}\n')
        third.settimeout(0.5)
        with pytest.raises(TimeoutError):
            third.recv(4096)  # no handler free yet
        held.pop().close()
        third.settimeout(30)
        assert json.loads(third.makefile("rb").readline()) == {"ok": True, "result": "status"}
    for s in held:
        s.close()
