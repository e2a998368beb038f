"""The resumable upload protocol (tus-like) and share links."""

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.current import AuthenticatedRequest, signed_in
from pfs import shares, upload_headers, uploads
from pfs.models import UploadSession

from .serializers import ShareCreateSerializer, ShareSerializer, UploadCreateSerializer, UploadSerializer
from .views import ERROR, ERRORS, OffsetRawParser, PfsView, RawParser, _upload_response

PROTOCOL = """
**Resumable upload protocol** (what `paddlectl cp` and the file browser use):

1. `POST /api/v2/uploads/` with JSON `{"path": "/pfs/<dc>/home/<you>/data/big.bin", "size": <bytes, at most 2^50>,
   "sha256": "<hex, optional>", "overwrite": true}` → **201** with the upload (`id`, `offset`: 0, ...)
   and a `Location` header. Instead of `sha256`, `"sha256_later": true` promises the whole file's
   sha256 in an `Upload-Sha256: <hex>` header of a later chunk (any chunk; at the latest an empty
   one, `Content-Length: 0`, at the upload's size), so the client can hash the file while it sends
   it; the upload is not put in place before it has the digest. The whole file may be checked by
   CRC-32C instead (`"crc32c": "<8 hex digits>"` or `"crc32c_later": true` with an `Upload-Crc32c`
   header): what `paddlectl` uses, at a tenth of sha256's CPU on both ends (as cloud object stores
   check whole objects); at most one of the four. Either way the server hashes the
   bytes as they arrive, so the check at the end costs no second read of the file. The whole size
   is checked against your storage quota now: **413** `quota exceeded: used X of Y` refuses it
   before any byte is sent. A 0-byte file is complete at once.
2. `PATCH /api/v2/uploads/<id>/` with headers `Upload-Offset: <offset>` (where this chunk starts,
   which must equal the upload's current offset), `Content-Type: application/offset+octet-stream`
   (or `application/octet-stream`), `Content-Length: <chunk bytes>` and optionally
   `Upload-Checksum: sha256 <base64 digest of this chunk>` (also `md5`, `sha1`); the body is the
   chunk's bytes. With token authentication a chunk may be the whole rest of the file (the
   fastest way: without a checksum the server moves it to disk with no copy through user
   space); with a browser session a chunk is at most 64 MiB. → **200** with the upload and an `Upload-Offset` header
   holding the new offset. A wrong offset → **409** with `{"detail", "offset": <current>}` and the
   `Upload-Offset` header (nothing written); a chunk checksum mismatch → **460** (the chunk is
   discarded); a chunk past the declared size → **413**. With token authentication the chunk is
   written to disk as it arrives, not buffered first: a request refused before its body is
   needed (bad token, unknown upload, wrong offset) is answered without reading the body, and
   the bytes of a chunk cut off mid-way are kept (unless it has an `Upload-Checksum`). Either
   way the upload's offset (step 3) says where to resume.
3. To resume after a dropped connection or a restart: `HEAD` (headers only) or `GET
   /api/v2/uploads/<id>/` → `Upload-Offset` / `offset` say how many bytes arrived; send on from there.
   `GET /api/v2/uploads/` lists your unfinished uploads.
4. When the last byte arrives the server checks the size and the digest (if given) and renames the
   file atomically onto `path` (parents created), so readers never see a partial file and concurrent
   uploads to one path leave one complete file. The PATCH answer then has `"complete": true`; a
   whole-file checksum mismatch → **422** and the upload is discarded. An `Upload-Sha256` (or
   `Upload-Crc32c`) other than the one given before is **422** too, one of the other algorithm than
   the upload's **400** (nothing written either way).
5. `DELETE /api/v2/uploads/<id>/` cancels and removes the partial data. Uploads with no chunk for
   24 hours are removed by the server.
"""


class UploadListView(PfsView):
    serializer_class = UploadSerializer

    def get_queryset(self) -> QuerySet[UploadSession]:
        if getattr(self, "swagger_fake_view", False):
            return UploadSession.objects.none()
        return UploadSession.objects.filter(user=signed_in(self.request), completed=None)

    @extend_schema(responses={200: UploadSerializer(many=True)})
    def get(self, request: AuthenticatedRequest) -> Response:
        """Your unfinished uploads (to resume them)."""
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(UploadSerializer(page, many=True).data)

    @extend_schema(request=UploadCreateSerializer, responses={201: UploadSerializer, **ERRORS, 413: ERROR},
                   description=PROTOCOL)
    def post(self, request: AuthenticatedRequest) -> Response:
        """Start a resumable upload."""
        data = UploadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        session = uploads.create(request.user, **data.validated_data)
        resp = _upload_response(session, status.HTTP_201_CREATED)
        resp["Location"] = request.build_absolute_uri(f"{session.pk}/")
        return resp


class UploadDetailView(PfsView):
    serializer_class = UploadSerializer
    parser_classes = [OffsetRawParser, RawParser]

    @extend_schema(responses={200: UploadSerializer, 404: ERROR}, description=PROTOCOL)
    def get(self, request: AuthenticatedRequest, upload_id: str) -> Response:
        """The upload's state; `offset` (and the `Upload-Offset` header) is where to resume.
        `HEAD` answers the same headers without a body."""
        return _upload_response(uploads.get(request.user, upload_id))

    @extend_schema(
        parameters=[
            OpenApiParameter("Upload-Offset",
                             {"type": "integer", "minimum": 0, "maximum": upload_headers.MAX_FILE_SIZE},
                             OpenApiParameter.HEADER, required=True,
                             description="Where this chunk starts: the upload's current offset."),
            OpenApiParameter("Upload-Checksum", OpenApiTypes.STR, OpenApiParameter.HEADER,
                             description="`sha256 <base64 digest of this chunk>` (or md5, sha1)."),
            OpenApiParameter("Upload-Sha256", OpenApiTypes.STR, OpenApiParameter.HEADER,
                             description="The whole file's sha256 (64 hex digits), for an upload created "
                                         "with `sha256_later`; checked when the last byte is in."),
            OpenApiParameter("Upload-Crc32c", OpenApiTypes.STR, OpenApiParameter.HEADER,
                             description="The whole file's CRC-32C (8 hex digits, big-endian), for an upload "
                                         "created with `crc32c_later`; checked when the last byte is in."),
        ],
        request={"application/offset+octet-stream": OpenApiTypes.BINARY,
                 "application/octet-stream": OpenApiTypes.BINARY},
        responses={200: UploadSerializer, **ERRORS, 410: ERROR, 411: ERROR, 413: ERROR, 422: ERROR, 460: ERROR},
        description=PROTOCOL,
    )
    def patch(self, request: AuthenticatedRequest, upload_id: str) -> Response:
        """Send the next chunk of an upload."""
        session = uploads.get(request.user, upload_id)
        offset = upload_headers.parse_offset(request.headers.get("Upload-Offset"))
        length = self.content_length()
        checksum = upload_headers.parse_checksum(request.headers.get("Upload-Checksum"))
        digest = upload_headers.parse_digest(request.headers.get("Upload-Sha256"), request.headers.get("Upload-Crc32c"))
        stream = request.stream
        read = stream.read if stream is not None else (lambda n: b"")
        uploads.write_chunk(session, offset, read, length, checksum, digest)
        session.refresh_from_db()
        return _upload_response(session)

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request: AuthenticatedRequest, upload_id: str) -> Response:
        """Cancel the upload and remove what arrived of it."""
        uploads.cancel(uploads.get(request.user, upload_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ShareListView(PfsView):
    serializer_class = ShareSerializer

    @extend_schema(responses={200: ShareSerializer(many=True)})
    def get(self, request: AuthenticatedRequest) -> Response:
        """Your active share links."""
        page = self.paginate_queryset(shares.active(request.user))
        return self.get_paginated_response(ShareSerializer(page, many=True, context={"request": request}).data)

    @extend_schema(request=ShareCreateSerializer, responses={201: ShareSerializer, **ERRORS})
    def post(self, request: AuthenticatedRequest) -> Response:
        """Share one file: anyone with the returned `url` (`/filepub/?uuid=<uuid>`) can download it
        until you revoke the link or it expires."""
        data = ShareCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        link = shares.create(request.user, data.validated_data["path"], expires=data.validated_data["expires"])
        return Response(ShareSerializer(link, context={"request": request}).data, status=status.HTTP_201_CREATED)


class ShareDetailView(PfsView):
    serializer_class = ShareSerializer

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request: AuthenticatedRequest, share_uuid: str) -> Response:
        """Revoke a share link (it answers 404 from now on)."""
        shares.revoke(request.user, share_uuid)
        return Response(status=status.HTTP_204_NO_CONTENT)
