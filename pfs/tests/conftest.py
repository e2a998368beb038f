import hashlib
import os

import pytest


def sha256_file(path, block=1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def sha256_stream(parts) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    for part in parts:
        h.update(part)
        n += len(part)
    return h.hexdigest(), n


@pytest.fixture
def home_dir(settings, alice):
    """alice's home on disk (created)."""
    d = settings.PFS_ROOT / "local" / "home" / "alice"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def public_dir(settings, datacenter):
    d = settings.PFS_ROOT / "local" / "public"
    d.mkdir(parents=True, exist_ok=True)
    (d / "dataset.txt").write_text("public data\n")
    return d


def write(path, data: bytes = b"hello\n"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def scratch(home_dir):
    """Where the service keeps the partial data of the home `home_dir` (outside it)."""
    return home_dir.parent.parent / ".scratch" / home_dir.name
