"""The storage quota against the v1 client's `touch` and chunks, tried as a hostile user would:
resizing a file while a chunk is being written into it, and touches that do not fit."""

from __future__ import annotations

import os
import socket

from pfs.usage import get_usage
from quotas.models import Quota
from tests.support import wait_for

from . import recorded as rec
from .test_chunk_upload import A, MiB, chunk_body, raw_request


def test_a_file_shrunk_while_a_chunk_is_written_into_it_is_charged_again_as_the_chunk_regrows_it(
        live, old_client, alice, datacenter, settings):
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=8 * MiB)
    c = old_client(alice)
    c.replay(rec.TOUCH, size=8 * MiB, path=f"{A}/a.bin")  # the quota full; a chunk inside needs no room
    on_disk = settings.PFS_ROOT / "local/home/alice/a.bin"
    data = os.urandom(8 * MiB)
    body = chunk_body(f"{A}/a.bin", 0, data, 8 * MiB)
    first = body.index(data) + 2 * MiB
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as s:
        s.sendall(raw_request(live, c.token, len(body)) + body[:first])
        wait_for(lambda: on_disk.read_bytes()[:MiB] == data[:MiB], 60, what="the chunk's first bytes")
        c.replay(rec.TOUCH, size=0, path=f"{A}/a.bin")  # credited: the home is empty now
        s.sendall(body[first:])  # the chunk grows the file back to 8 MiB
        assert b'"err": ""' in s.recv(65536)
    assert "quota exceeded" in c.replay(rec.TOUCH_REFUSED, size=8 * MiB, path=f"{A}/b.bin").json()["err"]
    assert not (on_disk.parent / "b.bin").exists()
    assert get_usage(alice, datacenter).used_bytes == on_disk.stat().st_size == 8 * MiB


def test_a_touch_over_the_quota_makes_no_directories(old_client, alice, datacenter, settings):
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=8 * MiB)
    r = old_client(alice).replay(rec.TOUCH_REFUSED, size=9 * MiB, path=f"{A}/d1/d2/big")
    assert "quota exceeded" in r.json()["err"]
    assert not (settings.PFS_ROOT / "local/home/alice/d1").exists()
