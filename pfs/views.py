"""The file browser: server-rendered pages, htmx for actions (each answers the refreshed
listing), and static/js/pfs.js for uploads through the resumable /api/v2/uploads/ protocol."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts.current import AuthenticatedHttpRequest

from . import services, shares, usage
from .forms import NameForm, ShareForm
from .paths import PathError, PfsPath, resolve


def _vpath(path: str) -> str:
    return path.removeprefix("/pfs/")


def _crumbs(p: PfsPath) -> list[tuple[str, str]]:
    parts = p.virtual.strip("/").split("/")  # pfs, dc, home, user, ...
    head = 4 if p.area == "home" else 3
    crumbs = [("/".join(parts[1:head]), "/" + "/".join(parts[:head]))]
    for i in range(head, len(parts)):
        crumbs.append((parts[i], "/" + "/".join(parts[: i + 1])))
    return [(name, reverse("pfs:browse", args=[_vpath(v) + "/"])) for name, v in crumbs]


def _context(request: AuthenticatedHttpRequest, path: str, **extra: str) -> dict[str, Any]:
    p = resolve(request.user, path)
    entries = services.listdir(request.user, p.virtual)
    u = usage.get_usage(request.user, p.datacenter)
    pct = min(100, round(100 * (u.used_bytes + u.reserved_bytes) / u.limit_bytes)) if u.limit_bytes else 100
    home = services.home_of(request.user, p.datacenter)
    return {
        "dir": p, "entries": entries, "crumbs": _crumbs(p), "usage": u, "usage_pct": pct,
        "writable": p.area == "home" or request.user.is_staff,
        "home_url": reverse("pfs:browse", args=[_vpath(home.virtual) + "/"]),
        "public_url": reverse("pfs:browse", args=[f"{p.datacenter}/public/"]),
        "shares": shares.active(request.user)[:50],
        "share_base": request.build_absolute_uri("/").rstrip("/"),
        "api_content": reverse("api:pfs-content"),
        **extra,
    }


def _listing(request: AuthenticatedHttpRequest, path: str, *, error: str = "", notice: str = "",
             status: int = 200) -> HttpResponse:
    try:
        ctx = _context(request, path, error=error, notice=notice)
    except PathError as e:
        return render(request, "pfs/_listing.html", {"error": e.message}, status=e.status)
    return render(request, "pfs/_listing.html", ctx, status=status)


@login_required
def files_home(request: AuthenticatedHttpRequest) -> HttpResponseBase:
    home = services.home_of(request.user, request.GET.get("datacenter") or settings.DEFAULT_DATACENTER)
    return redirect("pfs:browse", vpath=_vpath(home.virtual) + "/")


@login_required
@require_GET
def browse(request: AuthenticatedHttpRequest, vpath: str) -> HttpResponseBase:
    path = "/pfs/" + vpath
    try:
        p = resolve(request.user, path)
        if services.stat(request.user, p.virtual).type == "file":
            return redirect(reverse("api:pfs-content") + "?" + _query(p.virtual))
        ctx = _context(request, p.virtual)
    except PathError as e:
        return render(request, "pfs/browser.html", {"error": e.message}, status=e.status)
    return render(request, "pfs/browser.html", ctx)


def _query(path: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"path": path})


@login_required
@require_GET
def listing(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _listing(request, request.GET.get("path", ""))


def _action(request: AuthenticatedHttpRequest, fn: Callable[[], object], done: str) -> HttpResponse:
    """Run one change, then answer the refreshed listing of the directory it happened in (with
    what `fn` returns, when that is a message, else `done`)."""
    directory = request.POST.get("dir", "")
    try:
        msg = fn() or done
    except PathError as e:
        return _listing(request, directory, error=e.message)
    return _listing(request, directory, notice=str(msg))


@login_required
@require_POST
def make_dir(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = NameForm(request.POST)
    if not form.is_valid():
        return _listing(request, request.POST.get("dir", ""), error=str(form.errors["name"][0]))
    path = request.POST.get("dir", "").rstrip("/") + "/" + form.cleaned_data["name"]
    return _action(request, lambda: services.mkdir(request.user, path) and None,
                   f"Folder {form.cleaned_data['name']} created.")


@login_required
@require_POST
def rename(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = NameForm(request.POST)
    if not form.is_valid():
        return _listing(request, request.POST.get("dir", ""), error=str(form.errors["name"][0]))
    src = request.POST.get("path", "")
    dst = src.rstrip("/").rsplit("/", 1)[0] + "/" + form.cleaned_data["name"]
    return _action(request, lambda: services.move(request.user, src, dst) and None,
                   f"Renamed to {form.cleaned_data['name']}.")


@login_required
@require_POST
def delete(request: AuthenticatedHttpRequest) -> HttpResponse:
    path = request.POST.get("path", "")
    return _action(request, lambda: services.remove(request.user, path, recursive=True) and None,
                   f"Deleted {path.rsplit('/', 1)[-1]}.")


@login_required
@require_POST
def share(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ShareForm(request.POST)
    if not form.is_valid():  # never a link that outlives what its owner asked for
        return _listing(request, request.POST.get("dir", ""), error=str(form.errors["expires_days"][0]))
    days = form.cleaned_data["expires_days"]
    expires = timezone.now() + timedelta(days=days) if days else None

    def make() -> str:
        link = shares.create(request.user, request.POST.get("path", ""), expires=expires)
        return f"Share link: {shares.url_of(link, request.build_absolute_uri('/'))}"

    return _action(request, make, "")


@login_required
@require_POST
def unshare(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _action(request, lambda: shares.revoke(request.user, request.POST.get("uuid", "")) and "Link revoked.",
                   "Link revoked.")


def filepub(request: HttpRequest) -> HttpResponseBase:
    """GET /filepub/?uuid=<uuid>: a shared file, for anyone with the link (no login)."""
    try:
        return shares.serve(request.GET.get("uuid", ""), range_header=request.headers.get("Range"),
                            if_range=request.headers.get("If-Range"))
    except PathError as e:
        return HttpResponse(e.message + "\n", status=e.status, content_type="text/plain; charset=utf-8")
