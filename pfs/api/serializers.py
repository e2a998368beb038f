from datetime import timedelta
from typing import Any

from django.conf import settings
from rest_framework import serializers

from pfs import upload_headers, upload_parts
from pfs.models import ShareLink, UploadSession
from pfs.services import Entry


class EntrySerializer(serializers.Serializer[Entry]):
    name = serializers.CharField()
    path = serializers.CharField(help_text="PFS path, /pfs/<datacenter>/home/<you>/...")
    type = serializers.ChoiceField(choices=["file", "dir", "link"])
    size = serializers.IntegerField(help_text="Bytes (0 for directories and links).")
    mtime = serializers.DateTimeField()


class PathSerializer(serializers.Serializer[Any]):  # request bodies: no instance
    path = serializers.CharField(max_length=4096)


class MoveSerializer(serializers.Serializer[Any]):
    src = serializers.CharField(max_length=4096)
    dst = serializers.CharField(max_length=4096, help_text="New path, or an existing directory to move into.")
    overwrite = serializers.BooleanField(default=False, help_text="Replace an existing file at dst.")


class UploadCreateSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(max_length=4096, help_text="Where the file goes; missing parents are created.")
    size = serializers.IntegerField(min_value=0, max_value=upload_headers.MAX_FILE_SIZE,
                                    help_text="Total bytes of the file.")
    sha256 = serializers.RegexField(r"^[0-9a-fA-F]{64}$", required=False, allow_blank=True, default="",
                                    help_text="Hex sha256 of the whole file, verified before it is put in place.")
    sha256_later = serializers.BooleanField(
        default=False, help_text="The whole file's sha256 comes later, in an `Upload-Sha256` header of a chunk; "
                                 "the server hashes the bytes as they arrive and checks it at the last byte.")
    crc32c = serializers.RegexField(r"^[0-9a-fA-F]{8}$", required=False, allow_blank=True, default="",
                                    help_text="The whole file's CRC-32C (Castagnoli) as 8 hex digits (big-endian), "
                                              "verified before it is put in place.")
    crc32c_later = serializers.BooleanField(
        default=False, help_text="The whole file's CRC-32C comes later, in an `Upload-Crc32c` header of a chunk "
                                 "(what paddlectl uses: a tenth of sha256's cost). At most one of sha256, "
                                 "sha256_later, crc32c, crc32c_later.")
    overwrite = serializers.BooleanField(default=True, help_text="Replace an existing file at path.")


class UploadSerializer(serializers.ModelSerializer[UploadSession]):
    offset = serializers.SerializerMethodField(help_text="Bytes received so far: send the next chunk from here.")
    complete = serializers.SerializerMethodField()
    expires = serializers.SerializerMethodField(help_text="Abandoned after this time without a chunk.")

    sha256 = serializers.SerializerMethodField(help_text="The whole file's sha256 to check, if checked by sha256.")
    sha256_later = serializers.SerializerMethodField(help_text="Its sha256 is to come in a chunk's `Upload-Sha256`.")
    crc32c = serializers.SerializerMethodField(help_text="The whole file's CRC-32C to check (8 hex digits), if it is "
                                                         "checked by crc32c.")
    crc32c_later = serializers.SerializerMethodField(help_text="Its CRC-32C is to come in a chunk's `Upload-Crc32c`.")

    class Meta:
        model = UploadSession
        fields = ["id", "path", "size", "offset", "complete", "sha256", "sha256_later", "crc32c", "crc32c_later",
                  "overwrite", "created", "updated", "completed", "expires"]

    def get_offset(self, obj: UploadSession) -> int:
        return upload_parts.part_size(obj)

    def get_sha256(self, obj: UploadSession) -> str:
        return obj.digest if obj.digest_algorithm == "sha256" else ""

    def get_sha256_later(self, obj: UploadSession) -> bool:
        return obj.digest_later and obj.digest_algorithm == "sha256"

    def get_crc32c(self, obj: UploadSession) -> str:
        return obj.digest if obj.digest_algorithm == "crc32c" else ""

    def get_crc32c_later(self, obj: UploadSession) -> bool:
        return obj.digest_later and obj.digest_algorithm == "crc32c"

    def get_complete(self, obj: UploadSession) -> bool:
        return obj.completed is not None

    def get_expires(self, obj: UploadSession) -> str:
        return serializers.DateTimeField().to_representation(obj.updated + settings.PFS_UPLOAD_TTL)


class UsageSerializer(serializers.Serializer[dict[str, Any]]):
    datacenter = serializers.CharField()
    used_bytes = serializers.IntegerField(help_text="Bytes of files in your home.")
    reserved_bytes = serializers.IntegerField(help_text="Bytes still to come in your unfinished uploads.")
    limit_bytes = serializers.IntegerField(help_text="Your storage quota.")
    free_bytes = serializers.IntegerField()


class ShareCreateSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(max_length=4096)
    expires = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                        help_text="When the link stops working; never when omitted.")
    expires_in = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=60,
                                          max_value=10 * 366 * 24 * 3600,  # ten years
                                          help_text="Alternatively: seconds from now (at most ten years).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        from django.utils import timezone

        if attrs.get("expires_in"):
            attrs["expires"] = timezone.now() + timedelta(seconds=attrs["expires_in"])
        return attrs


class ShareSerializer(serializers.ModelSerializer[ShareLink]):
    url = serializers.SerializerMethodField()

    class Meta:
        model = ShareLink
        fields = ["uuid", "path", "url", "created", "expires", "revoked", "downloads"]

    def get_url(self, obj: ShareLink) -> str:
        request = self.context.get("request")
        from django.conf import settings

        base = request.build_absolute_uri("/") if request is not None else settings.SITE_URL
        return f"{base.rstrip('/')}/filepub/?uuid={obj.uuid}"
