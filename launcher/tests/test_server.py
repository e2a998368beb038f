"""The launcher's socket, in process: when its name appears, connections to it are taken."""

from __future__ import annotations

import os
import socket

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
