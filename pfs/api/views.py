"""/api/v2 storage endpoints. Thin: every operation is a call into pfs.services / pfs.uploads /
pfs.transfer / pfs.shares, whose PathError(message, status) becomes `{"detail": message}`."""

from collections.abc import Iterable, Mapping
from typing import IO, Any

from django.conf import settings
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.current import AuthenticatedRequest
from pfs import services, transfer, uploads
from pfs.models import UploadSession
from pfs.paths import PathError
from pfs.usage import get_usage

from .serializers import EntrySerializer, MoveSerializer, PathSerializer, UploadSerializer, UsageSerializer

PATH_PARAM = OpenApiParameter("path", OpenApiTypes.STR, required=True,
                              description="PFS path: /pfs/<datacenter>/home/<you>/... or /pfs/<datacenter>/public/...")
ERROR = OpenApiResponse(inline_serializer("PfsError", {"detail": serializers.CharField()}),
                        description="The path or operation is refused; `detail` says why.")
ERRORS = {400: ERROR, 403: ERROR, 404: ERROR, 409: ERROR}


class RawParser(BaseParser):
    """Request bodies that are file bytes. Never parsed: views read `request.stream` in blocks."""

    media_type = "application/octet-stream"

    def parse(self, stream: IO[Any], media_type: str | None = None,  # type: ignore[override]
              parser_context: Mapping[str, Any] | None = None) -> IO[Any]:
        return stream  # the stream is the data: views read it in blocks


class OffsetRawParser(RawParser):
    media_type = "application/offset+octet-stream"


class AnyAccept(BaseContentNegotiation):
    """Downloads answer with the file's bytes whatever the client's Accept header says."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return parsers[0] if parsers else None  # type: ignore[index]  # DRF passes lists; its stubs say Iterable

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type  # type: ignore[index]  # a list, as above


class PfsView(GenericAPIView[Any]):  # no model: the generic view for its pagination
    filter_backends = ()

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, PathError):
            body: dict[str, Any] = {"detail": exc.message}
            headers: dict[str, str] = {}
            if isinstance(exc, uploads.OffsetConflict):
                body["offset"] = exc.offset
                headers["Upload-Offset"] = str(exc.offset)
            return Response(body, status=exc.status, headers=headers)
        return super().handle_exception(exc)

    def path_param(self) -> str:
        path = self.request.query_params.get("path")
        if not path:
            raise PathError("the 'path' query parameter is required")
        return path

    def bool_param(self, name: str) -> bool:
        return self.request.query_params.get(name, "").lower() in ("1", "true", "yes")

    def content_length(self) -> int:
        try:
            return int(self.request.META["CONTENT_LENGTH"])
        except (KeyError, ValueError):
            raise PathError("Content-Length is required (chunked request bodies are not accepted)", 411) from None


class FilesView(PfsView):
    serializer_class = EntrySerializer

    @extend_schema(
        parameters=[OpenApiParameter("path", OpenApiTypes.STR, description="Directory to list; your home when omitted"),
                    OpenApiParameter("datacenter", OpenApiTypes.STR, description="For the default path")],
        responses={200: EntrySerializer(many=True), **ERRORS},
    )
    def get(self, request: AuthenticatedRequest) -> Response:
        """List a directory: name, path, type (file/dir/link), size and mtime of each entry,
        directories first. Paginated with `limit`/`offset`; listing a file gives that file."""
        path = request.query_params.get("path")
        if not path:
            dc = request.query_params.get("datacenter") or settings.DEFAULT_DATACENTER
            path = services.home_of(request.user, dc).virtual
        entries = services.listdir(request.user, path)
        page = self.paginate_queryset(entries)
        # many=True takes a list; DRF's stubs type the one instance only
        return self.get_paginated_response(EntrySerializer(page, many=True).data)  # type: ignore[arg-type]

    @extend_schema(parameters=[PATH_PARAM, OpenApiParameter("recursive", OpenApiTypes.BOOL,
                                                            description="Required to remove a directory")],
                   responses={204: None, **ERRORS})
    def delete(self, request: AuthenticatedRequest) -> Response:
        """Remove a file or link; a directory (and everything in it) only with `recursive=true`."""
        services.remove(request.user, self.path_param(), recursive=self.bool_param("recursive"))
        return Response(status=status.HTTP_204_NO_CONTENT)


class StatView(PfsView):
    serializer_class = EntrySerializer

    @extend_schema(parameters=[PATH_PARAM], responses={200: EntrySerializer, **ERRORS})
    def get(self, request: AuthenticatedRequest) -> Response:
        """One path's name, type, size and mtime (links are not followed). 404 when missing."""
        return Response(EntrySerializer(services.stat(request.user, self.path_param())).data)


class MkdirView(PfsView):
    serializer_class = PathSerializer

    @extend_schema(request=PathSerializer, responses={201: EntrySerializer, **ERRORS})
    def post(self, request: AuthenticatedRequest) -> Response:
        """Create a directory and any missing parents (`mkdir -p`); fine if it exists."""
        data = PathSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.mkdir(request.user, data.validated_data["path"])
        return Response(EntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class MoveView(PfsView):
    serializer_class = MoveSerializer

    @extend_schema(request=MoveSerializer, responses={200: EntrySerializer, **ERRORS, 413: ERROR})
    def post(self, request: AuthenticatedRequest) -> Response:
        """Move or rename `src` to `dst` (into `dst` when it is an existing directory)."""
        data = MoveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.move(request.user, **data.validated_data)
        return Response(EntrySerializer(entry).data)


class CopyView(PfsView):
    serializer_class = MoveSerializer

    @extend_schema(request=MoveSerializer, responses={201: EntrySerializer, **ERRORS, 413: ERROR})
    def post(self, request: AuthenticatedRequest) -> Response:
        """Copy a file or a directory tree within PFS (counts against your quota)."""
        data = MoveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = services.copy(request.user, **data.validated_data)
        return Response(EntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class ContentView(PfsView):
    parser_classes = [RawParser, OffsetRawParser]
    content_negotiation_class = AnyAccept

    @extend_schema(
        parameters=[PATH_PARAM, OpenApiParameter("Range", OpenApiTypes.STR, OpenApiParameter.HEADER,
                                                 description="One byte range, e.g. bytes=1000- (206 answer)")],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                   (206, "application/octet-stream"): OpenApiTypes.BINARY,
                   (416, "application/octet-stream"): OpenApiResponse(description="Range not satisfiable"),
                   **ERRORS},
    )
    def get(self, request: AuthenticatedRequest) -> HttpResponseBase:
        """Download. A file streams with `Accept-Ranges: bytes`, `ETag` and `Last-Modified`; one
        `Range: bytes=a-b` (or `a-`, `-n`) answers 206 with `Content-Range` (use `If-Range` with the
        ETag to resume safely), an unsatisfiable one 416. A directory streams as a zip (ZIP64)."""
        return transfer.download(request.user, self.path_param(), range_header=request.headers.get("Range"),
                                 if_range=request.headers.get("If-Range"))

    @extend_schema(
        parameters=[PATH_PARAM, OpenApiParameter("overwrite", OpenApiTypes.BOOL, description="Default true")],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={201: EntrySerializer, **ERRORS, 411: ERROR, 413: ERROR},
    )
    def put(self, request: AuthenticatedRequest) -> Response:
        """One-shot upload of a small file (up to 64 MiB; use /uploads/ for anything bigger or
        to resume): the body is the file's bytes, `Content-Length` required. Written to a
        temporary file and renamed into place, so readers never see a partial file. Refused with
        413 "quota exceeded: used X of Y" when it does not fit."""
        length = self.content_length()
        if length > settings.PFS_MAX_CHUNK:
            raise PathError(f"at most {settings.PFS_MAX_CHUNK} bytes in one request: use /api/v2/uploads/", 413)
        overwrite = request.query_params.get("overwrite", "true").lower() not in ("0", "false", "no")
        stream = request.stream
        chunks = iter(lambda: stream.read(uploads.BLOCK), b"") if stream is not None else iter(())
        entry = services.write_file(request.user, self.path_param(), chunks, length=length, overwrite=overwrite)
        return Response(EntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class UsageView(PfsView):
    serializer_class = UsageSerializer

    @extend_schema(parameters=[OpenApiParameter("datacenter", OpenApiTypes.STR)],
                   responses={200: UsageSerializer, 404: ERROR})
    def get(self, request: AuthenticatedRequest) -> Response:
        """Your storage use and quota in a datacenter (kept current on every write and delete)."""
        dc = request.query_params.get("datacenter") or settings.DEFAULT_DATACENTER
        home = services.home_of(request.user, dc)
        u = get_usage(request.user, home.datacenter)
        return Response(UsageSerializer({"datacenter": dc, "used_bytes": u.used_bytes,
                                         "reserved_bytes": u.reserved_bytes, "limit_bytes": u.limit_bytes,
                                         "free_bytes": u.free_bytes}).data)


def _upload_response(session: UploadSession, code: int = status.HTTP_200_OK) -> Response:
    data = UploadSerializer(session).data
    return Response(data, status=code, headers={"Upload-Offset": str(data["offset"]),
                                                "Upload-Length": str(session.size),
                                                "Cache-Control": "no-store"})
