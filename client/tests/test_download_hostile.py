"""Downloads from a server that lies (paddlectl/pfs_local.py): names in a listing that would
write outside the destination, links in the destination that lead out of it, names the local
file system folds into one, and bodies longer or shorter than announced or resumed at the
wrong byte. Nothing may be written outside the destination, nor left looking complete."""

from __future__ import annotations

import json
from pathlib import Path, PosixPath

import httpx
import pytest

from paddlectl import Client
from paddlectl.errors import PaddlectlError

from .hostile_server import Answer, HostileServer, file_entry

FIT = "/pfs/local/home/alice/models/fit"


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.close()


def _client(server: HostileServer, streamed: bool = False) -> Client:
    """`streamed`: bodies through httpx (as over TLS) rather than spliced by wire.py."""
    return Client(server.url, token="t", username="alice", transport=httpx.HTTPTransport() if streamed else None)


def _files_below(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.parametrize("bad", [
    f"{FIT}/../../../../../../escaped.txt",  # .. in the path
    f"{FIT}/sub/../../escaped.txt",
    "/tmp/escaped.txt",  # somewhere else altogether
    f"{FIT}/nul\0.txt",
    f"{FIT}//escaped.txt",  # an empty name: the path would read as absolute
    f"{FIT}/.",
])
def test_a_listing_that_names_a_file_outside_the_directory_is_refused_before_anything_is_written(
        hostile, tmp_path, bad):
    hostile.listings[FIT] = [file_entry(f"{FIT}/ok.bin", 2), file_entry(bad, 4)]
    hostile.files.update({f"{FIT}/ok.bin": b"ok", bad: b"evil"})
    work = tmp_path / "work"  # tmp_path holds the test's $HOME too
    dest = work / "a" / "b" / "c" / "d" / "e" / "f" / "model"
    dest.parent.mkdir(parents=True)
    with _client(hostile) as client, pytest.raises(PaddlectlError, match="not a file in it"):
        client.storage.download_tree(FIT, dest)
    assert _files_below(work) == {"a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e", "a/b/c/d/e/f"}
    assert not any("escaped" in p for p, _ in hostile.requests)


def test_a_listing_that_lists_its_own_directory_again_does_not_loop(hostile, tmp_path):
    hostile.listings[FIT] = [file_entry(FIT, kind="dir")]
    with _client(hostile) as client, pytest.raises(PaddlectlError, match="not a file in it"):
        client.storage.download_tree(FIT, tmp_path / "model")


def test_nothing_is_written_through_a_link_in_the_destination_that_leads_out_of_it(hostile, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    (dest / "model").mkdir(parents=True)
    (dest / "model" / "sub").symlink_to(outside)
    hostile.listings[FIT] = [file_entry(f"{FIT}/sub", kind="dir")]
    hostile.listings[f"{FIT}/sub"] = [file_entry(f"{FIT}/sub/w.bin", 4)]
    hostile.files[f"{FIT}/sub/w.bin"] = b"evil"
    with _client(hostile) as client, pytest.raises(PaddlectlError, match="link out of"):
        client.storage.download_tree(FIT, dest / "model", root=dest)
    assert list(outside.iterdir()) == []


def test_the_cli_does_not_download_a_tree_into_a_link_in_the_destination_that_leads_out(hostile, tmp_path,
                                                                                           monkeypatch):
    from .conftest import run_cli

    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "fit").symlink_to(outside)  # `cp -r .../fit dest` writes dest/fit
    hostile.answers["/api/v2/datacenters/"] = lambda _: Answer(body=b'[{"name": "local"}]')
    hostile.answers["/api/v2/files/stat/"] = lambda _: Answer(body=json.dumps(file_entry(FIT, kind="dir")).encode())
    hostile.listings[FIT] = [file_entry(f"{FIT}/w.bin", 4)]
    hostile.files[f"{FIT}/w.bin"] = b"evil"
    for key, value in {"PADDLECTL_ENDPOINT": hostile.url, "PADDLECTL_TOKEN": "t", "PADDLECTL_USERNAME": "alice",
                       "PADDLECTL_DATACENTER": "local"}.items():
        monkeypatch.setenv(key, value)
    result = run_cli("cp", "-r", FIT, dest)
    assert result.code == 1 and "outside" in result.err, result
    assert list(outside.iterdir()) == []


def test_links_inside_the_destination_are_followed_and_scratch_files_are_never_written_through(hostile, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    dest = tmp_path / "model"
    (dest / "real").mkdir(parents=True)
    (dest / "alias").symlink_to("real")  # stays inside: fine
    (dest / "real" / "w.bin.part").symlink_to(outside)
    (dest / "real" / "w.bin.part.json").symlink_to(outside)
    hostile.listings[FIT] = [file_entry(f"{FIT}/alias", kind="dir")]
    hostile.listings[f"{FIT}/alias"] = [file_entry(f"{FIT}/alias/w.bin", 7)]
    hostile.files[f"{FIT}/alias/w.bin"] = b"weights"
    with _client(hostile) as client:
        assert client.storage.download_tree(FIT, dest) == 1
    assert (dest / "real" / "w.bin").read_bytes() == b"weights"
    assert outside.read_bytes() == b"precious"


def test_two_names_the_local_file_system_takes_for_one_are_refused_not_overwritten(hostile, tmp_path, monkeypatch):
    original = PosixPath.joinpath
    # a file system that folds case, as macOS's and Windows' do by default
    monkeypatch.setattr(PosixPath, "joinpath", lambda self, *parts: original(self, *(p.lower() for p in parts)))
    hostile.listings[FIT] = [file_entry(f"{FIT}/Model.bin", 5), file_entry(f"{FIT}/model.bin", 4)]
    hostile.files.update({f"{FIT}/Model.bin": b"first", f"{FIT}/model.bin": b"evil"})
    with _client(hostile) as client, pytest.raises(PaddlectlError, match="are one file here"):
        client.storage.download_tree(FIT, tmp_path / "model")
    assert (tmp_path / "model" / "model.bin").read_bytes() == b"first"


def test_a_body_longer_than_announced_is_refused_and_nothing_is_left(hostile, tmp_path):
    # no Content-Length: the body ends when the connection closes, past the listed 5 bytes
    hostile.answers["/api/v2/files/content/"] = lambda _: Answer(body=b"x" * 50_000, length=False)
    work = tmp_path / "work"
    work.mkdir()
    with _client(hostile, streamed=True) as client, pytest.raises(PaddlectlError, match="more than the 5 bytes"):
        client.storage.download_file(f"{FIT}/w.bin", work / "w.bin", size=5)
    assert list(work.iterdir()) == []


def test_a_body_shorter_than_announced_is_not_taken_for_the_file_but_resumed(hostile, tmp_path):
    data = b"0123456789" * 100

    def answer(headers: dict[str, str]) -> Answer:
        if "Range" not in headers:  # the first try stops half way, without saying how long it was
            return Answer(body=data[:400], headers={"ETag": '"e1"'}, length=False)
        start = int(headers["Range"].split("=")[1].rstrip("-"))
        return Answer(206, data[start:], {"ETag": '"e1"', "Content-Range": f"bytes {start}-999/1000"})

    hostile.answers["/api/v2/files/content/"] = answer
    with _client(hostile, streamed=True) as client:
        client.storage.download_file(f"{FIT}/w.bin", tmp_path / "w.bin", size=len(data))
    assert (tmp_path / "w.bin").read_bytes() == data
    assert [h.get("Range") for _, h in hostile.requests] == [None, "bytes=400-"]


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("content_range", ["bytes 0-99/100", "bytes 50-79/100"])
def test_an_answer_resumed_at_the_wrong_byte_or_short_of_the_end_is_not_spliced_on(hostile, tmp_path, streamed,
                                                                                   content_range):
    data = bytes(range(100))
    start, end = (int(n) for n in content_range.split()[1].split("/")[0].split("-"))
    hostile.answers["/api/v2/files/content/"] = lambda _: Answer(
        206, data[start:end + 1], {"ETag": '"e1"', "Content-Range": content_range})
    (tmp_path / "w.bin.part").write_bytes(data[:50])
    (tmp_path / "w.bin.part.json").write_text(json.dumps({"path": f"{FIT}/w.bin", "etag": '"e1"'}))
    with _client(hostile, streamed) as client, pytest.raises(PaddlectlError, match="not at byte 50"):
        client.storage.download_file(f"{FIT}/w.bin", tmp_path / "w.bin", size=100)
    assert not (tmp_path / "w.bin").exists()
    assert (tmp_path / "w.bin.part").read_bytes() == data[:50]


@pytest.mark.parametrize("streamed", [False, True])
def test_an_error_body_of_a_download_is_read_only_as_far_as_its_message_needs(hostile, tmp_path, streamed):
    hostile.answers["/api/v2/files/content/"] = lambda _: Answer(500, b"e" * (1 << 20), repeat=256)  # 256 MiB
    with _client(hostile, streamed) as client, pytest.raises(PaddlectlError) as e:
        client.storage.download_file(f"{FIT}/w.bin", tmp_path / "w.bin", size=5)
    assert len(str(e.value)) <= 500 and hostile.sent < 64 << 20
