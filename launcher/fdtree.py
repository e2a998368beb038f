"""Walking and removing a directory tree by descriptor, in a loop rather than by recursion.

os.fwalk and shutil.rmtree recurse once per level (RecursionError past ~1,000 levels, even with
ignore_errors) and hold a descriptor per level; a job makes a tree far deeper than that in a
second (`mkdir d; cd d` in a loop: no PATH_MAX applies). Here the directories from the top to
the current one are an explicit stack. Each is opened by name in its parent's descriptor with
O_NOFOLLOW | O_DIRECTORY, so a link is never followed and a directory swapped for one meanwhile is
not entered. At most HELD descriptors stay open: deeper down, an ancestor's is closed, and the
walk climbs back to it through "..", which must be that same directory (device and inode) or the
walk stops with `Moved` rather than go on anywhere else.

Shared by the launcher, its keeper, pfs and the local backend, so it imports only os (the
keeper loads it: see keeper_main's imports) and nothing of the service.
"""

import os

TYPE_CHECKING = False  # typing's would cost the keeper an import
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
HELD = 64  # directory descriptors one walk holds at most


class Moved(OSError):
    """A directory the walk left to go deeper is no longer the parent of where it came back from."""


def ident(st: os.stat_result) -> tuple[int, int]:
    """What tells one file from another, to keep in a set (os.path.samestat compares two)."""
    return st.st_dev, st.st_ino


def _ident(fd: int) -> tuple[int, int]:
    return ident(os.fstat(fd))


def _listing(fd: int) -> tuple[list[str], list[str]]:
    """(real directories, everything else) in the directory `fd`; what cannot be read is left out."""
    dirs: list[str] = []
    files: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
                except OSError:
                    continue  # gone meanwhile
    except OSError:
        pass
    return dirs, files


def walk(top_fd: int) -> "Iterator[tuple[list[str], int, list[str], list[str]]]":
    """What os.fwalk(dir_fd=top_fd) yields, top-down and without following links: (path, dir_fd,
    dirs, files) for each directory, the top first with path []. `path` (the names from the top)
    is the walk's own list: read it before the next step, never keep or change it. `dirs` are real
    directories (not links to one); take names out of it to leave them out of the walk. `files`
    is everything else. What cannot be listed or entered is left out, as os.fwalk does."""
    return _walk(top_fd, rmdirs=False)


def entries(top_fd: int) -> "Iterator[tuple[int, os.DirEntry[str]]]":
    """(dir_fd, entry) for everything below the directory `top_fd`, top-down, never following a
    link, each directory read as the walk goes rather than listed whole first: one of millions of
    names costs no more memory than one of ten, but for the names of its subdirectories, kept to
    enter them next. `entry.stat(follow_symlinks=False)` measures it by `dir_fd` (fstatat); use
    either only before the next step. What cannot be read or entered is left out, as in `walk`."""
    for _path, fd, enter in _tree(top_fd, rmdirs=False):
        try:
            with os.scandir(fd) as found:
                for entry in found:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            enter.append(entry.name)
                    except OSError:
                        continue  # not readable
                    yield fd, entry
        except OSError:
            continue  # not readable, or not all of it


def _walk(top_fd: int, rmdirs: bool) -> "Iterator[tuple[list[str], int, list[str], list[str]]]":
    for path, fd, enter in _tree(top_fd, rmdirs):
        dirs, files = _listing(fd)
        yield path, fd, dirs, files
        enter += dirs  # what the caller left of them


def _tree(top_fd: int, rmdirs: bool) -> "Iterator[tuple[list[str], int, list[str]]]":
    """(path, dir_fd, enter) for each directory, the top first: the consumer puts in `enter` the
    names of the subdirectories to go into next (in order), before its next step."""
    fds = [os.dup(top_fd)]  # -1 where closed to stay under HELD
    idents = [_ident(fds[0])]
    path: list[str] = []  # the names from the top to fds[-1]
    todo: list[list[str]] = []  # per level, the subdirectories still to enter (last first)
    try:
        while True:
            enter: list[str] = []
            yield path, fds[-1], enter
            enter.reverse()
            todo.append(enter)
            while not _enter_next(fds, idents, path, todo):
                todo.pop()  # this directory is done: back to its parent
                if not path:
                    return
                name = path.pop()
                _climb(fds, idents, name)
                if rmdirs:
                    _quietly(os.rmdir, name, fds[-1])
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def _enter_next(fds: list[int], idents: list[tuple[int, int]], path: list[str], todo: list[list[str]]) -> bool:
    """Open the next subdirectory of the current one still to enter, if any is left."""
    while todo[-1]:
        name = todo[-1].pop()
        try:
            fd = os.open(name, DIRECTORY, dir_fd=fds[-1])
        except OSError:
            continue  # gone, swapped for a link or a file, or not readable
        fds.append(fd)
        idents.append(_ident(fd))
        path.append(name)
        if len(fds) > HELD + 1:  # the top's is never closed
            os.close(fds[-HELD - 1])
            fds[-HELD - 1] = -1
        return True
    return False


def _climb(fds: list[int], idents: list[tuple[int, int]], name: str) -> None:
    """Close the current directory (`name`), its parent's descriptor open again if it was closed."""
    fd = fds.pop()
    idents.pop()
    try:
        if fds[-1] < 0:
            fds[-1] = os.open("..", DIRECTORY, dir_fd=fd)
            if _ident(fds[-1]) != idents[-1]:
                raise Moved(f"{name!r} was moved out of its directory while the tree was walked")
    finally:
        os.close(fd)


def _quietly(remove: "Callable[..., None]", name: str, dir_fd: int) -> None:
    """`remove(name, dir_fd=dir_fd)`, a failure ignored (not contextlib.suppress: the keeper's imports)."""
    try:
        remove(name, dir_fd=dir_fd)
    except OSError:
        return


def clear(dir_fd: int) -> None:
    """Remove everything in the directory `dir_fd`, never through a link; what cannot be removed
    (not permitted, or moved away meanwhile) stays, silently, as with rmtree's ignore_errors."""
    try:
        for _path, fd, _dirs, files in _walk(dir_fd, rmdirs=True):
            for name in files:
                _quietly(os.unlink, name, fd)
    except OSError:
        pass


def remove(name: str, dir_fd: int) -> None:
    """Remove `name` in `dir_fd`, the whole tree if it is a directory (a link is removed, never
    followed); errors are ignored as in `clear`."""
    try:
        fd = os.open(name, DIRECTORY, dir_fd=dir_fd)
    except OSError:  # not a directory (a link to one included), or gone
        _quietly(os.unlink, name, dir_fd)
        return
    try:
        clear(fd)
    finally:
        os.close(fd)
    _quietly(os.rmdir, name, dir_fd)


def rmtree(path: str | os.PathLike[str]) -> None:
    """shutil.rmtree(path, ignore_errors=True) without its recursion: `path` need not exist."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        remove(name, fd)
    finally:
        os.close(fd)
