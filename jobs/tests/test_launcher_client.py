"""The service's launcher client (jobs/backends/local/launcher_client.py) against sockets the test
holds: a launcher whose backlog is full is waited for, not taken for absent."""

import json
import socket
import threading

import pytest

from jobs.backends.local import launcher_client


def fill_backlog(path: str) -> list[socket.socket]:
    """Connections the listener has not accepted, until one more would be turned away (EAGAIN)."""
    waiting = []
    while True:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return waiting
        waiting.append(s)


def test_a_request_waits_while_the_launchers_backlog_is_full(tmp_path, settings, monkeypatch):
    path = str(tmp_path / "launcher.sock")
    settings.LAUNCHER_SOCKET = path
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    waiting = fill_backlog(path)
    listener.settimeout(30)  # a request that gave up never comes
    answers: list = []
    turned_away = threading.Event()
    pause = launcher_client.time.sleep

    def note_the_retry(seconds):
        turned_away.set()
        pause(seconds)

    monkeypatch.setattr(launcher_client.time, "sleep", note_the_retry)
    asking = threading.Thread(target=lambda: answers.append(_ask_status()))
    asking.start()
    while asking.is_alive() and not turned_away.wait(0.05):
        pass
    # The launcher catches up: it takes the waiting connections, then the request, and answers it.
    for s in waiting:
        listener.accept()[0].close()
        s.close()
    conn, _ = listener.accept()
    with conn, conn.makefile("rwb") as f:
        assert json.loads(f.readline())["op"] == "status"
        f.write(json.dumps({"ok": True, "result": {"why": ""}}).encode() + b"\n")
    asking.join(30)
    listener.close()
    assert answers == [{"why": ""}]


def _ask_status():
    try:
        return launcher_client.ask("status")
    except launcher_client.LauncherError as e:
        return e


@pytest.mark.django_db
def test_many_requests_at_once_are_all_answered_by_the_launcher():
    """The real launcher this run uses (conftest's launcher_service): a burst as wide as a few
    jobs' replicas launched together."""
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(_ask_status())) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    refused = [r for r in results if not isinstance(r, dict)]
    assert len(results) == 64 and not refused, refused[:3]
