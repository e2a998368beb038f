"""In a real browser (Debian's Chromium driven by Playwright): upload a folder into the file
browser with progress bars, with the connection dropped in the middle of a chunk, and see the
upload resume from the server's offset and finish intact. Skipped without Chromium."""

import os
from pathlib import Path

import pytest

from tests.support import needs_chromium

from .conftest import sha256_file

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium,
]


def test_folder_upload_with_progress_survives_a_dropped_connection(page, live_server, home_dir, tmp_path, settings):
    folder = tmp_path / "dataset"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "part-0.bin").write_bytes(os.urandom(20 * 2**20 + 3))  # three 8 MiB chunks
    (folder / "README.txt").write_text("a small file\n")

    dropped = []

    def drop_second_chunk(route, request):
        # The connection dies during the second chunk of the big file, once.
        if request.method == "PATCH" and request.headers.get("upload-offset") == str(8 * 2**20) and not dropped:
            dropped.append(request.url)
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/api/v2/uploads/**", drop_second_chunk)
    page.goto(f"{live_server.url}/files/")
    page.locator("#dropzone").wait_for()
    page.set_input_files("#pick-folder", str(folder))

    rows = page.locator("#uploads .upload")
    rows.first.wait_for()
    page.locator("#uploads .upload progress").first.wait_for()
    page.locator("#uploads .upload .status", has_text="connection lost").wait_for()
    page.locator("#uploads .upload.done").nth(1).wait_for(timeout=60_000)
    assert rows.count() == 2
    assert [rows.nth(i).locator(".status").inner_text() for i in range(2)] == ["done", "done"]
    assert all(rows.nth(i).locator("progress").get_attribute("value") == "100" for i in range(2))
    assert dropped, "the connection was never dropped"

    stored = home_dir / "dataset" / "train" / "part-0.bin"
    assert sha256_file(stored) == sha256_file(folder / "train" / "part-0.bin")
    assert (home_dir / "dataset" / "README.txt").read_text() == "a small file\n"
    # the listing refreshed by itself, and nothing is left to resume
    page.locator("#listing a.dir", has_text="dataset/").wait_for()
    assert page.evaluate("localStorage.getItem('pfs-uploads')") == "{}"
    shots = settings.VAR_DIR / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "files-upload.png"), full_page=True)

    # download it back through the browser's link
    page.goto(f"{live_server.url}/files/local/home/alice/dataset/")
    with page.expect_download() as dl:
        page.click("tr[data-name='README.txt'] a[download]")
    assert dl.value.suggested_filename == "README.txt"
    assert Path(dl.value.path()).read_text() == "a small file\n"
