"""Guards on the third-party internals the service relies on: each seam module (the only
modules that touch a library's private methods or internal state) records, in PINNED, the
sha256 of the source of every internal it overrides or drives, as in the pinned version. An
upgrade that changes one fails here, naming it, before it can silently break transfers or live
updates: read the new source, adapt the seam, then record the new fingerprint."""

import hashlib
import importlib
import inspect
import pkgutil
from importlib.metadata import version

import pytest

from core import asgi_django, channel_layer, prepared, server
from pfs import asgi_responses

SEAMS = {server: "uvicorn", asgi_responses: "django", asgi_django: "django", prepared: "django",
         channel_layer: "channels_redis"}
FIRST_PARTY = ("accounts", "core", "jobs", "legacy", "notifications", "paddleweb", "pfs", "quotas")


def fingerprint(dotted: str) -> str:
    module, _, attribute = dotted.partition(":")
    obj = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


def changed_internals(pinned: dict[str, str]) -> list[str]:
    changed = []
    for dotted, recorded in pinned.items():
        try:
            now = fingerprint(dotted)
        except (AttributeError, ImportError, OSError, TypeError) as e:
            now = f"gone ({e})"
        if now != recorded:
            changed.append(f"{dotted}: recorded {recorded}, now {now}")
    return changed


def test_a_changed_or_removed_internal_is_reported_by_name():
    pinned = dict(server.PINNED)
    pinned["uvicorn.protocols.http.httptools_impl:RequestResponseCycle.send"] = "0" * 16  # as if uvicorn changed it
    pinned["uvicorn.protocols.http.httptools_impl:HttpToolsProtocol._gone"] = "0" * 16
    assert [c.split(":")[1] for c in changed_internals(pinned)] == ["RequestResponseCycle.send",
                                                                   "HttpToolsProtocol._gone"]


@pytest.mark.parametrize("seam", SEAMS, ids=lambda m: m.__name__)
def test_the_library_internals_a_seam_relies_on_are_unchanged(seam):
    changed = changed_internals(seam.PINNED)
    assert not changed, (f"{SEAMS[seam]} {version(SEAMS[seam])} changed what {seam.__name__} relies on; "
                         f"re-read it, adapt {seam.__file__}, then record the new fingerprints:\n"
                         + "\n".join(changed))


def test_no_other_module_imports_private_names_of_uvicorn_django_or_channels_redis():
    """A private name (`_x`) of these libraries is imported only by a seam module."""
    import ast
    from pathlib import Path

    seams = {Path(m.__file__).resolve() for m in SEAMS}
    root = Path(__file__).resolve().parents[1]
    found = []
    for package in FIRST_PARTY:
        for path in (root / package).rglob("*.py"):
            if path.resolve() in seams or "/tests/" in str(path) or "/migrations/" in str(path):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                        "uvicorn", "django", "channels_redis"):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    private += [p for p in (node.module or "").split(".") if p.startswith("_")]
                    if private:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {node.module} {private}")
    assert found == []


def test_every_first_party_override_of_a_library_class_lives_in_a_seam():
    """Subclasses of the classes the seams extend exist only in the seam modules."""
    from channels_redis.core import RedisChannelLayer
    from django.core.handlers.asgi import ASGIHandler
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    for package in FIRST_PARTY:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            if ".tests" not in info.name and ".migrations" not in info.name and "management.commands" not in info.name:
                importlib.import_module(info.name)
    allowed = {m.__name__ for m in SEAMS}
    for base in (HttpToolsProtocol, ASGIHandler, RedisChannelLayer):
        for sub in base.__subclasses__():
            if sub.__module__.split(".")[0] in FIRST_PARTY:
                assert sub.__module__ in allowed, f"{sub.__module__}.{sub.__name__} overrides {base.__name__}"
