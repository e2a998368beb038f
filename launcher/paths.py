"""Paths in requests: checked as text, then opened from the roots one component at a time,
never following a symbolic link, so nothing a caller (or a job) swaps in can lead elsewhere."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable
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


def _descend(top_fd: int, parts: tuple[str, ...], step: Callable[[int, int], int]) -> int:
    """The descriptor `step(dir_fd, i)` opens for parts[i] in the one before, from `top_fd` (kept
    open) down to the last part; each step closed once the next is open."""
    fd = os.dup(top_fd)
    try:
        for i in range(len(parts)):
            below = step(fd, i)
            os.close(fd)
            fd = below
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


def open_at(root_fd: int, parts: tuple[str, ...], flags: int, mode: int = 0o600) -> int:
    """Open `parts` below the directory `root_fd`, no component a symbolic link."""
    def step(fd: int, i: int) -> int:
        how = flags if i == len(parts) - 1 else os.O_PATH | os.O_DIRECTORY
        try:
            return os.open(parts[i], how | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as e:
            raise Refused(f"cannot open {'/'.join(parts[:i + 1])}: {e.strerror}") from None

    return _descend(root_fd, parts, step)


def open_real_dir(path: str, flags: int = os.O_PATH, *, make: bool = False) -> int:
    """The directory `path` (absolute, normalised) opened from / one component at a time, none of
    them a symbolic link (Refused); with `make`, missing ones are made (0755) on the way. The
    service account owns its state directory, so it could replace a root there with a link to
    /etc for the next start as root: a root process never follows a link to a root."""
    if not isinstance(path, str) or not os.path.isabs(path) or os.path.normpath(path) != path or "\0" in path:
        raise Refused(f"not an absolute, normalised path: {path!r}")
    parts = PurePosixPath(path).parts[1:]
    top = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _descend(top, parts, lambda fd, i: _real_dir_at(fd, parts[i], flags, make, path))
    finally:
        os.close(top)


def _real_dir_at(fd: int, part: str, flags: int, make: bool, path: str) -> int:
    how = flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            return os.open(part, how, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: opened as any other
                os.mkdir(part, 0o755, dir_fd=fd)
            return os.open(part, how, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{path}: {part} is a symbolic link or not a directory; give the real directory") from None
        raise Refused(f"{path}: {e.strerror}") from None


class Roots:
    """The directories requests may name things below, opened once at start, through no link
    (open_real_dir): a root the service renames or replaces later is still the directory the
    launcher was started with."""

    def __init__(self, **roots: str) -> None:
        self.paths = {name: os.path.abspath(path) for name, path in roots.items()}
        self.fds = {name: open_real_dir(path) for name, path in self.paths.items()}

    def open(self, kind: str, path: object, flags: int = os.O_PATH | os.O_DIRECTORY, mode: int = 0o600) -> int:
        """An fd for `path`, which must be below the root `kind`."""
        return open_at(self.fds[kind], parts_below(self.paths[kind], path), flags, mode)

    def directory(self, kind: str, path: object) -> int:
        """A directory below `kind`, opened for reading (an fd to walk or write below)."""
        return self.open(kind, path, os.O_RDONLY | os.O_DIRECTORY)
