"""/api/v1 (protocol-v1.md), thin: each view parses the old client's request, calls the same
services as /api/v2 (through legacy.services for the renaming) and answers in its shapes.

The old client fails on any status line but `200 OK`, so refusals are 200 with a non-empty
`msg` (`err` for PFS commands) and a numeric `code`. Two exceptions: a missing or wrong token
is 401 as everywhere, and a refused download (file or chunk bytes) keeps its error status, so
the client reports it instead of saving the error text as the file's content."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ParseError

from accounts import services as accounts
from accounts import throttle
from accounts.models import Datacenter
from core.parsers import BoundedJSONParser
from jobs import services as jobs
from jobs.lifecycle.queue import held
from pfs import chunks, shares, transfer
from pfs import services as pfs
from pfs.paths import PathError
from quotas import services as quotas

from . import services
from .serializers import shapes

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from jobs.models import Job

_P = ParamSpec("_P")
# An /api/v1 view as written (given the token's user) and as Django calls it.
_UserView = Callable[Concatenate[HttpRequest, "User", _P], HttpResponseBase]
_View = Callable[Concatenate[HttpRequest, _P], HttpResponseBase]

BOUNDARY = "8d7b0e5709d756e21e971ff4d9ac3b20"
MAX_PFS_JSON = 2048  # the protocol's bound on a PFS command's JSON body


def _json(request: HttpRequest, limit: int | None = None) -> dict[str, Any]:
    """The request's JSON object (every v1 body is one)."""
    if limit is not None and len(request.body) > limit:
        raise PathError(f"the request body must be at most {limit} bytes", 413)
    try:
        body = BoundedJSONParser().parse(io.BytesIO(request.body or b"{}"))
    except ParseError as e:
        raise ValidationError(f"the request body is not valid JSON: {e.detail}") from None
    if not isinstance(body, dict):
        raise ValidationError("the request body must be a JSON object")
    services.check_body(body)
    return body


def _msg(code: int, msg: object) -> JsonResponse:
    return JsonResponse({"code": code, "msg": msg})


def _refusal(kind: str, exc: Exception) -> HttpResponseBase:
    code, text = services.error_text(exc)
    text = text or "refused"  # an empty msg/err would read as success
    if kind == "pfs":
        return JsonResponse({"err": text, "results": None})
    if kind == "raw":
        return JsonResponse({"code": code, "msg": text}, status=code)
    return _msg(code, text)


def endpoint(*methods: str, kind: str = "msg") -> Callable[[_UserView[_P]], _View[_P]]:
    """A view of the old client's: token only (no session, so no CSRF), the listed methods,
    the user passed in, and service refusals answered in the `kind` of envelope."""
    def wrap(view: _UserView[_P]) -> _View[_P]:
        @csrf_exempt
        @wraps(view)
        def handler(request: HttpRequest, /, *args: _P.args, **kwargs: _P.kwargs) -> HttpResponseBase:
            user = accounts.user_for_token(request.headers.get("Authorization") or "")
            if user is None:
                resp = JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
                resp["WWW-Authenticate"] = "Token"
                return resp
            if request.method not in methods:
                return _refusal(kind, services.LegacyError(f"{request.method} is not allowed here", 405))
            try:
                return view(request, user, *args, **kwargs)
            except (ValidationError, PathError, services.LegacyError) as e:
                return _refusal(kind, e)
        return handler
    return wrap


@csrf_exempt
def token_auth(request: HttpRequest) -> HttpResponse:
    """`{"username","password"}` -> `{"token"}`, behind the same brute-force throttle as logins."""
    if request.method != "POST":
        return JsonResponse({"detail": f'Method "{request.method}" not allowed.'}, status=405)
    try:
        body = _json(request)
        username, password = body.get("username"), body.get("password")
        if not isinstance(username, str) or not isinstance(password, str) or not username or not password:
            raise ValidationError("username and password are required")
        user = throttle.token_login(request, username, password)
    except throttle.LoginThrottled as e:
        return throttle.refusal(request, e)  # {"code": 429, "msg"} as the rest of /api/v1
    except ValidationError as e:  # as /api/v2's login: a field's errors under its name
        return JsonResponse(e.message_dict if hasattr(e, "error_dict") else {"non_field_errors": e.messages},
                            status=400)
    return JsonResponse({"token": services.legacy_token(user)})


# --- jobs ------------------------------------------------------------------------------------

def _visible(user: User) -> list[Job]:
    return list(jobs.visible_jobs(user).prefetch_related("replicas"))


@endpoint("GET", "POST", "DELETE")
def jobs_view(request: HttpRequest, user: User) -> HttpResponseBase:
    if request.method == "GET":
        return JsonResponse(shapes.job_list(_visible(user)))
    body = _json(request)
    if request.method == "POST":
        jobs.submit_job(user, services.submission(user, body))
    else:
        services.kill(user, body.get("jobname"))
    return _msg(200, "")


@endpoint("GET")
def pservers(request: HttpRequest, user: User) -> HttpResponseBase:
    return JsonResponse(shapes.pserver_list(_visible(user)))


@endpoint("GET")
def workers(request: HttpRequest, user: User) -> HttpResponseBase:
    """An unknown job (or another user's) has no workers: an empty list, which the client prints."""
    try:
        job = services.own_job(user, request.GET.get("jobname"))
    except services.LegacyError:
        job = None
    return JsonResponse(shapes.pod_list(job, services.pod_name))


@endpoint("GET")
def logs(request: HttpRequest, user: User) -> HttpResponseBase:
    g = request.GET
    return _msg(200, services.logs_text(user, g.get("jobname"), g.get("n"), g.get("w")))


@endpoint("GET")
def quota(request: HttpRequest, user: User) -> HttpResponseBase:
    name = request.GET.get("dc") or settings.DEFAULT_DATACENTER
    dc = Datacenter.objects.filter(name=name).first() if "\x00" not in name else None
    if dc is None:
        raise services.LegacyError(f"no datacenter named '{name}'")
    used, running = held(user, dc)
    limits = quotas.effective_quota(user, dc)
    return JsonResponse(shapes.quota_list(limits, used, running, services.running_pods(user, dc)))


# --- registries ------------------------------------------------------------------------------

@endpoint("GET", "POST", "DELETE")
def registry(request: HttpRequest, user: User) -> HttpResponseBase:
    if request.method == "GET":
        return _msg(200, shapes.registry_list(list(user.registries.all())))
    body = _json(request)
    if request.method == "POST":
        accounts.create_registry(user, **services.registry_fields(body))
    else:
        accounts.delete_registry(services.own_registry(user, body.get("name")))
    return _msg(200, "")


# --- files -----------------------------------------------------------------------------------

@endpoint("GET", "POST")
def file(request: HttpRequest, user: User) -> HttpResponseBase:
    path = request.GET.get("path", "")
    if request.method == "GET":
        try:
            return transfer.download(user, path)
        except (PathError, ValidationError) as e:
            return _refusal("raw", e)
    upload = request.FILES.get("file")
    if upload is None:
        raise ValidationError({"file": ["send the file as the multipart field 'file'"]})
    pfs.write_file(user, path, upload.chunks(), length=upload.size)
    return _msg(200, "")


@endpoint("GET")
def filelist(request: HttpRequest, user: User) -> HttpResponseBase:
    dc = request.GET.get("dc") or settings.DEFAULT_DATACENTER
    path = request.GET.get("path") or "/"
    if not path.startswith("/pfs/"):
        path = f"/pfs/{dc}/home/{user.get_username()}/{path.lstrip('/')}"
    try:
        names = [e.name for e in pfs.listdir(user, path)]
    except PathError as e:
        return JsonResponse({"code": e.status, "msg": e.message, "items": []})
    return JsonResponse({"msg": "", "items": names})


@endpoint("GET", "POST")
def publish(request: HttpRequest, user: User) -> HttpResponseBase:
    base = request.build_absolute_uri("/")
    if request.method == "GET":
        links = list(shares.active(user))
        return JsonResponse({"files": [link.path for link in links], "urls": [shares.url_of(link, base)
                                                                             for link in links]})
    link = shares.create(user, str(_json(request).get("path") or ""))
    return JsonResponse({"url": shares.url_of(link, base)})


# --- PFS commands ----------------------------------------------------------------------------

def _ok(results: object) -> JsonResponse:
    return JsonResponse({"err": "", "results": results})


@endpoint("GET", "POST", "DELETE", kind="pfs")
def pfs_files(request: HttpRequest, user: User) -> HttpResponseBase:
    if request.method == "GET":
        method = request.GET.get("method")
        if method == "ls":
            entries = services.ls(user, request.GET.getlist("arg"), recursive=request.GET.get("r") == "true")
            return _ok([shapes.pfs_entry(e) for e in entries])
        if method == "stat":
            return _ok(shapes.pfs_entry(pfs.stat(user, request.GET.get("path", ""))))
        raise services.LegacyError(f"unknown method '{method}'", 400)
    body = _json(request, MAX_PFS_JSON)
    method = body.get("method")
    paths = body.get("path")
    if request.method == "POST" and method == "touch":
        p = chunks.touch(user, str(paths or ""), services.as_int(body.get("filesize"), "filesize"))
        return _ok(shapes.pfs_entry(pfs.stat(user, p.virtual)))
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise PathError("path must be a list of paths")
    if request.method == "POST" and method == "mkdir":
        return _ok([shapes.pfs_entry(pfs.mkdir(user, p)) for p in paths])
    if request.method == "DELETE" and method == "rm":
        removed = services.rm(user, paths, recursive=body.get("r") is True)
        return _ok([{"Path": p} for p in removed])
    raise services.LegacyError(f"unknown method '{method}'", 400)


@endpoint("GET", kind="pfs")
def pfs_chunks(request: HttpRequest, user: User) -> HttpResponseBase:
    g = request.GET
    if g.get("method") != "GetChunkMeta":
        raise services.LegacyError(f"unknown method '{g.get('method')}'", 400)
    return _ok(chunks.chunk_meta(user, g.get("path", ""), services.as_int(g.get("offset"), "offset"),
                                 services.as_int(g.get("chunksize"), "chunksize")))


class _ChunkPart(TemporaryFileUploadHandler):
    """Keeps a part's whole filename (the chunk's address): Django cuts file names to 255
    characters, and a chunk's holds a whole PFS path."""

    def file_complete(self, file_size: int) -> UploadedFile[Any] | None:
        f = super().file_complete(file_size)
        f.address = self.file_name  # type: ignore[union-attr]  # a file always; ours carries its address
        return f


@endpoint("GET", "POST", kind="pfs")
def pfs_storage_chunks(request: HttpRequest, user: User) -> HttpResponseBase:
    if request.method == "GET":
        g = request.GET
        path = g.get("path", "")
        try:
            offset, size = services.as_int(g.get("offset"), "offset"), services.as_int(g.get("chunksize"), "chunksize")
            data = chunks.read_range(user, path, offset, size)
        except PathError as e:
            return _refusal("raw", e)
        return StreamingHttpResponse(_Multipart(path, offset, size, data),
                                     content_type=f"multipart/form-data; boundary={BOUNDARY}")
    request.upload_handlers = [_ChunkPart(request)]
    part = request.FILES.get("chunk")
    if part is None:
        raise PathError("send the chunk as the multipart part 'chunk'")
    path, offset, size = services.chunk_target(part.address)  # type: ignore[attr-defined]  # _ChunkPart's
    assert part.size is not None  # a stored upload knows its size
    if part.size > size:
        raise PathError(f"the chunk has {part.size} bytes, more than its chunksize {size}")
    with part.open("rb") as f:
        written = chunks.write_range(user, path, offset, f.read, part.size)
    return _ok({"offset": offset, "len": written})


class _Multipart:
    """One chunk as the client reads it: a multipart body with the fixed boundary, one part
    named `chunk` whose filename is the chunk's address. Closing it closes the file."""

    def __init__(self, path: str, offset: int, size: int, data: transfer.FileSpan):
        name = urlencode({"chunksize": size, "offset": offset, "path": path})
        self.head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="chunk"; filename="{name}"\r\n'
                     "Content-Type: application/octet-stream\r\n\r\n").encode()
        self.tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        yield from self.data
        yield self.tail

    def close(self) -> None:
        self.data.close()


@csrf_exempt  # changes nothing: a POST gets the same answer
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
    return _msg(404, f"no such /api/v1 endpoint: {request.path}")

