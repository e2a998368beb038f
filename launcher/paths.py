"""Paths in requests: checked as text, then opened from the roots one component at a time,
never following a symbolic link, so nothing a caller (or a job) swaps in can lead elsewhere."""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath


class Refused(Exception):
    """A request the launcher will not carry out; the message goes back to the caller."""


NAME = re.compile(r"[\w.@+-]{1,150}")  # a Django username: letters, digits and @.+-_ (never : or a newline)


def parts_below(root: str, path: object) -> tuple[str, ...]:
    """The components of `path` below `root`, which it must lie strictly within, as plain text."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path or len(path) > 4096:
        raise Refused(f"not an absolute path: {path!r}")
    pure = PurePosixPath(path)
    if str(pure) != path.rstrip("/") or ".." in pure.parts or "." in pure.parts:
        raise Refused(f"not a normalised path: {path!r}")
    try:
        rel = pure.relative_to(root)
    except ValueError:
        raise Refused(f"{path} is outside {root}") from None
    if not rel.parts:
        raise Refused(f"{path} is the root {root} itself")
    return rel.parts


def open_at(root_fd: int, parts: tuple[str, ...], flags: int, mode: int = 0o600) -> int:
    """Open `parts` below the directory `root_fd`, no component a symbolic link."""
    fd = os.dup(root_fd)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                step = os.open(part, (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                               mode, dir_fd=fd)
            except OSError as e:
                raise Refused(f"cannot open {'/'.join(parts[:i + 1])}: {e.strerror}") from None
            os.close(fd)
            fd = step
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


class Roots:
    """The directories requests may name things below, opened once at start: a root the service
    renames or replaces later is still the directory the launcher was started with."""

    def __init__(self, **roots: str) -> None:
        self.paths = {name: os.path.realpath(path) for name, path in roots.items()}
        self.fds = {name: os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for name, path in self.paths.items()}

    def open(self, kind: str, path: object, flags: int = os.O_PATH | os.O_DIRECTORY, mode: int = 0o600) -> int:
        """An fd for `path`, which must be below the root `kind`."""
        return open_at(self.fds[kind], parts_below(self.paths[kind], path), flags, mode)

    def directory(self, kind: str, path: object) -> int:
        """A directory below `kind`, opened for reading (an fd to walk or write below)."""
        return self.open(kind, path, os.O_RDONLY | os.O_DIRECTORY)
