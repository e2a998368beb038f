"""Spellings of PFS paths: seed 004 writes a home as `/pfs/{datacenter}/user/{username}`, the
server and the other seeds as `/pfs/{datacenter}/home/{username}`; both name the same place."""

from __future__ import annotations


def home_form(path: str) -> str:
    """`path` with a `/pfs/<dc>/user/<name>` home rewritten to `/pfs/<dc>/home/<name>`."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[0] == "" and parts[1] == "pfs" and parts[3] == "user":
        parts[3] = "home"
    return "/".join(parts)
