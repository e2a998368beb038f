"""Spellings of PFS paths: seed 004 writes a home as `/pfs/{datacenter}/user/{username}`, the
server and the other seeds as `/pfs/{datacenter}/home/{username}`; both name the same place."""

from __future__ import annotations

import posixpath


def is_remote(path: str) -> bool:
    return path == "/pfs" or path.startswith("/pfs/")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/") or "/", *[p.strip("/") for p in parts if p])


def home_form(path: str) -> str:
    """`path` with a `/pfs/<dc>/user/<name>` home rewritten to `/pfs/<dc>/home/<name>`."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[0] == "" and parts[1] == "pfs" and parts[3] == "user":
        parts[3] = "home"
    return "/".join(parts)


def in_home(home: str, path: str) -> str:
    """A directory as seeds 000/001 give `--input`/`--output`: a /pfs path as is (either home
    spelling), anything else inside `home` (seed 001 writes `/quickstart/input`)."""
    remote = is_remote(path)
    parts = [p for p in home_form(path).split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path}: '..' is not allowed in a PFS directory")
    return "/" + "/".join(parts) if remote else "/".join([home.rstrip("/"), *parts])
