"""PFS commands: cp, ls, mkdir, rm, mv, and seed 004's `file src dest`."""

from __future__ import annotations

import argparse
import os
import posixpath
from pathlib import Path
from typing import Any

from ..errors import PaddlectlError
from ..pfs_local import child_of
from ..pfs_paths import is_remote, join
from . import output
from .base import Context, UsageError, command
from .progress import transfer_progress

LS_COLUMNS: list[output.Column] = [
    ("NAME", lambda e: e["name"] + ("/" if e.get("type") == "dir" else "")),
    ("TYPE", lambda e: e.get("type")),
    ("SIZE", lambda e: output.human_bytes(e.get("size")) if e.get("type") == "file" else "-"),
    ("MODIFIED", lambda e: output.timestamp(e.get("mtime"))),
]
LS_WIDE: list[output.Column] = [("BYTES", lambda e: e.get("size")), ("PATH", lambda e: e.get("path"))]


def _show_progress(ctx: Context) -> bool:
    return ctx.output in ("table", "wide")


# --- cp -------------------------------------------------------------------------------------
def _cp_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="<src> ... <dest>")
    p.add_argument("-r", "-R", "--recursive", dest="recursive", action="store_true", help="copy directories")


def _upload(ctx: Context, src: str, dest: str, dest_is_dir: bool, recursive: bool) -> None:
    storage = ctx.client.storage
    path = Path(src)
    if not path.exists():
        raise PaddlectlError(f"{src}: no such file or directory")
    target = join(dest, path.resolve().name) if dest_is_dir else dest.rstrip("/")
    with transfer_progress(f"Uploading {src}", _show_progress(ctx)) as progress:
        if path.is_dir():
            if not recursive:
                raise UsageError(f"{src} is a directory (use -r)")
            n = storage.upload_tree(path, target, progress)
            print(f"{src} -> {target} ({n} files)")
        else:
            storage.upload_file(path, target, progress)
            print(f"{src} -> {target}")


def _download(ctx: Context, src: str, dest: str, dest_is_dir: bool) -> None:
    """A remote directory is downloaded whole, -r or not: seed 003 downloads a job's output
    directory with a plain `pfs cp <remote dir> ./output`."""
    storage = ctx.client.storage
    entry = storage.stat(src)
    target = Path(dest) / posixpath.basename(src.rstrip("/")) if dest_is_dir else Path(dest)
    with transfer_progress(f"Downloading {src}", _show_progress(ctx)) as progress:
        if entry["type"] == "dir":
            # a link at dest/<name> that leads out of dest is not written through
            n = storage.download_tree(src, target, progress, root=dest if dest_is_dir else target)
            print(f"{src} -> {target} ({n} files)")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            storage.download_file(src, target, progress, size=int(entry.get("size", 0)))
            print(f"{src} -> {target}")


@command("cp", "upload or download files", group="pfs", setup=_cp_setup,
         usage="paddlectl cp [-r] <src> [<src> ...] <dest>  (one side local, the other /pfs/...; or both /pfs)")
def cp(ctx: Context, args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        raise UsageError("give at least one source and a destination")
    *sources, dest = args.paths
    storage = ctx.client.storage if any(is_remote(p) for p in args.paths) else None
    if storage is None:
        raise UsageError("one side must be a PFS path (/pfs/<datacenter>/home/<you>/...)")
    sources = [_remote(ctx, p) if is_remote(p) else p for p in sources]
    dest = _remote(ctx, dest) if is_remote(dest) else dest
    if is_remote(dest):
        dest_is_dir = dest.endswith("/") or storage.is_dir(dest) or len(sources) > 1
        if len(sources) > 1 and not storage.exists(dest):
            storage.mkdir(dest)
        for src in sources:
            if is_remote(src):
                entry = storage.copy(src, dest if dest_is_dir else dest, overwrite=True)
                output.say(f"{src} -> {entry['path']}")
            else:
                _upload(ctx, src, dest, dest_is_dir, args.recursive)
    else:
        if any(not is_remote(s) for s in sources):
            raise UsageError("local to local copies are not paddlectl's job: use cp")
        dest_is_dir = dest.endswith(("/", os.sep)) or Path(dest).is_dir() or len(sources) > 1
        if dest_is_dir:
            Path(dest).mkdir(parents=True, exist_ok=True)
        for src in sources:
            _download(ctx, src, dest, dest_is_dir)
    return 0


# --- ls / mkdir / rm / mv -------------------------------------------------------------------
def _ls_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="<remote dir>", help="default: your home")
    p.add_argument("-r", "-R", "--recursive", dest="recursive", action="store_true",
                   help="also what is below each directory (NAME is the path inside the one listed)")


@command("ls", "List files on PaddlePaddle Cloud", group="pfs", setup=_ls_setup,
         usage="paddlectl ls [-r] [<remote dir>]")
def ls(ctx: Context, args: argparse.Namespace) -> int:
    storage = ctx.client.storage
    paths = [_remote(ctx, p) for p in args.paths] or [ctx.client.home()]
    entries: list[dict[str, Any]] = []
    for path in paths:
        entries.extend(_tree(storage, path, "") if args.recursive else storage.ls(path))
    output.emit(entries, ctx.output, LS_COLUMNS, LS_WIDE)
    return 0


def _tree(storage: Any, path: str, prefix: str) -> list[dict[str, Any]]:
    """Every entry below directory `path`, depth first, named by its path inside the one listed."""
    out = []
    for entry in storage.ls(path):
        out.append({**entry, "name": prefix + entry["name"]})
        if entry.get("type") == "dir":  # only a directory in this one: a listing cannot loop
            out.extend(_tree(storage, child_of(path, entry), f"{prefix}{entry['name']}/"))
    return out


def _remote(ctx: Context, path: str) -> str:
    """A PFS path the user typed, as the server names it (Client.pfs_path)."""
    if not is_remote(path):
        raise UsageError(f"{path}: not a PFS path (it must start with /pfs/<datacenter>/...)")
    return str(ctx.client.pfs_path(path))


def _mkdir_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="<remote dir>")
    p.add_argument("-p", "--parents", action="store_true", help="accepted for habit: parents are always created")


@command("mkdir", "mkdir directoies on PaddlePaddle Cloud", group="pfs", setup=_mkdir_setup,
         usage="paddlectl mkdir <remote dir> ...")
def mkdir(ctx: Context, args: argparse.Namespace) -> int:
    for path in args.paths:
        entry = ctx.client.storage.mkdir(_remote(ctx, path))
        output.say(f"created {entry['path']}")
    return 0


def _rm_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="<remote>")
    p.add_argument("-r", "-R", "--recursive", dest="recursive", action="store_true", help="remove directories")


@command("rm", "rm files on PaddlePaddle Cloud", group="pfs", setup=_rm_setup, usage="paddlectl rm [-r] <remote> ...")
def rm(ctx: Context, args: argparse.Namespace) -> int:
    for path in args.paths:
        ctx.client.storage.rm(_remote(ctx, path), recursive=args.recursive)
        print(f"removed {path}")
    return 0


def _mv_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="<remote src>")
    p.add_argument("dest", metavar="<remote dest>")
    p.add_argument("-f", "--force", action="store_true", help="replace an existing file at dest")


@command("mv", "move or rename files on PaddlePaddle Cloud", group="pfs", setup=_mv_setup,
         usage="paddlectl mv [-f] <remote src> <remote dest>")
def mv(ctx: Context, args: argparse.Namespace) -> int:
    entry = ctx.client.storage.mv(_remote(ctx, args.src), _remote(ctx, args.dest), overwrite=args.force)
    output.say(f"{args.src} -> {entry['path']}")
    return 0


# --- file (seed 004) ------------------------------------------------------------------------
def _file_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="<src>", help="a file or directory under the current directory (no ../)")
    p.add_argument("dest", metavar="<dest>", help="a directory in your home: /pfs/<datacenter>/home/<you>/... "
                   "(or /pfs/<datacenter>/user/<you>/...)")


def check_file_src(src: str, cwd: Path | None = None) -> Path:
    """Seed 004: src must be below the current directory; `../` is not allowed."""
    cwd = (cwd or Path.cwd()).resolve()
    if os.path.isabs(src):
        raise UsageError(f"{src}: src must be a relative path below the current directory")
    if ".." in Path(src).parts:
        raise UsageError(f"{src}: '../' is not allowed in src")
    path = (cwd / src).resolve()
    if path != cwd and cwd not in path.parents:
        raise UsageError(f"{src}: src must be inside the current directory")
    if not path.exists():
        raise PaddlectlError(f"{src}: no such file or directory")
    return path


@command("file", "Simple file operations.", group="main", setup=_file_setup, usage="paddlectl file <src> <dest>")
def file(ctx: Context, args: argparse.Namespace) -> int:
    """`src/` uploads what is inside src into dest; `src` uploads the directory src into dest."""
    path = check_file_src(args.src)
    home = ctx.client.home()
    dest = ctx.client.pfs_path(args.dest.rstrip("/"))
    if dest != home and not dest.startswith(home + "/"):
        raise UsageError(f"{args.dest}: dest must be in your home, {home}/...")
    storage = ctx.client.storage
    contents = args.src.endswith("/") and path.is_dir()
    target = dest if contents else join(dest, path.name)
    with transfer_progress(f"Uploading {args.src}", _show_progress(ctx)) as progress:
        if path.is_dir():
            n = storage.upload_tree(path, target, progress)
            print(f"{args.src} -> {target} ({n} files)")
        else:
            storage.mkdir(dest)
            storage.upload_file(path, target, progress)
            print(f"{args.src} -> {target}")
    return 0
