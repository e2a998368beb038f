"""Where a download lands on the local disk. The server's listing names the files of a tree, and
a name from it is never trusted: each part must be a plain name (no `..`, `/`, NUL), each
directory on the way must stay inside the destination however links there point, and two names
the local file system takes for one (`A` and `a` where case is folded) are refused, not merged.
Each response is checked against the length it announced before the file is put in place."""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any

from .errors import ConnectionFailed, PaddlectlError

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class UnsafeEntry(PaddlectlError):
    """The server named a file that cannot be written where it says, safely."""


class Overlong(PaddlectlError):
    """The server sent more of a file than it announced."""


def child_of(directory: str, entry: dict[str, Any]) -> str:
    """`entry`'s path, once checked to be one plain name below `directory` (a listing that named
    anything else could write outside the destination, or loop forever)."""
    path = entry.get("path")
    parent, _, name = path.rpartition("/") if isinstance(path, str) else ("", "", "")
    if parent != posixpath.normpath(directory) or not plain_name(name):
        raise UnsafeEntry(f"the listing of {directory} names {path!r}, which is not a file in it: refused")
    return str(path)


def plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and "\0" not in name and "/" not in name \
        and not (os.altsep and os.altsep in name) and os.sep not in name


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, is `root` (resolved) or below it."""
    resolved, top = path.resolve(), root.resolve()
    return resolved == top or top in resolved.parents


def make_parents(target: Path, local: Path, root: Path) -> None:
    """The directories from `local` down to `target`'s, made one at a time; refused where one is
    a link (or a file) that leads out of `root`."""
    current = local
    for part in target.relative_to(local).parts[:-1]:
        current = current / part
        if current.is_symlink() and not inside(current, root):
            raise UnsafeEntry(f"{current} is a link out of {root}: nothing is written through it")
        current.mkdir(exist_ok=True)
    if not inside(target.parent, root):
        raise UnsafeEntry(f"{target.parent} is outside {root}: nothing is written there")


def no_link(*paths: Path) -> None:
    """Remove any link at the download's own scratch names: they are written, never followed."""
    for path in paths:
        if path.is_symlink():
            path.unlink()


def open_flags(resumed: bool) -> int:
    """For the partial file: never through a link, appended to only when the server resumed."""
    return os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | (0 if resumed else os.O_TRUNC)


def inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def check_size(remote: str, size: int, end: int | None, done: bool = False) -> int:
    """`size` (of the partial copy so far), once checked against the `end` announced: past it is
    an error; short of it at the end of the body, a dropped connection (resumed from there)."""
    if end is not None and size > end:
        raise Overlong(f"download of {remote}: the server sent more than the {end} bytes it announced")
    if done and end is not None and size < end:
        raise ConnectionFailed(f"download of {remote}: the answer ended at byte {size} of {end}")
    return size


def expected_size(status: int, headers: Any, have: int, listed: int | None) -> int | None:
    """The size the file will have once this answer's body is written: from its Content-Range
    (which must start where the partial copy ends) or Content-Length; the listed size when the
    answer gives neither; None when nothing says."""
    given = (headers.get("content-length") or "").strip()
    length = int(given) if given.isdigit() else None
    if status == 206:
        match = _CONTENT_RANGE.match(headers.get("content-range", "").strip())
        end = int(match[2]) + 1 if match else 0
        if not match or int(match[1]) != have or (length is not None and have + length != end) \
                or (match[3] != "*" and end != int(match[3])):
            raise PaddlectlError(f"the server resumed the download at {headers.get('content-range')!r}, "
                                 f"not at byte {have} where the partial copy ends, to the file's end")
        return end
    return length if length is not None else listed
