import uuid

from django.conf import settings
from django.db import models


class StorageUsage(models.Model):
    """Bytes in one user's home in one datacenter. Every write and delete through the storage
    service adjusts it; `pfs.usage.recompute` (periodic task, `manage.py pfs_usage`) corrects it
    for what jobs wrote directly."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="storage_usage")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE, related_name="storage_usage")
    used_bytes = models.BigIntegerField(default=0)
    # Running sum of every increase of used_bytes: a recount adds what grew during its walk,
    # so a file put in place behind the walker is never left uncounted.
    grown_bytes = models.BigIntegerField(default=0)
    recomputed = models.DateTimeField(null=True, blank=True, help_text="Last full walk of the home.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "datacenter"], name="pfs_usage_one_per_home")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.datacenter}: {self.used_bytes} bytes"


def part_file_name(upload_id: object) -> str:
    """An upload's part file's name in its home's scratch directory (pfs.upload_parts writes
    it; the orphan sweep recognises it)."""
    return f"{upload_id}.part"


class UploadSession(models.Model):
    """A resumable upload: data goes to `<id>.part` in the home's scratch directory (outside the
    home: storage.scratch_fd) until `size` bytes are there,
    then it is verified and renamed onto `path`. The part file's length is the upload offset."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="pfs_uploads")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE, related_name="pfs_uploads")
    path = models.CharField(max_length=4096, help_text="Destination PFS path.")
    size = models.PositiveBigIntegerField()
    # The whole file's check before it is put in place: sha256, or crc32c (what paddlectl uses:
    # a tenth of sha256's CPU, the check cloud object stores make of whole objects). The digest
    # is given when the upload is created, or promised (`digest_later`) and brought by a chunk.
    digest_algorithm = models.CharField(max_length=8, blank=True, choices=[("sha256", "sha256"), ("crc32c", "crc32c")],
                                        help_text="How the whole file is checked (blank: only its size).")
    digest = models.CharField(max_length=64, blank=True, help_text="Expected hex digest of the whole file.")
    digest_later = models.BooleanField(default=False, help_text="The digest comes with a chunk (Upload-Sha256 or "
                                       "Upload-Crc32c); the upload is not put in place without it.")
    overwrite = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    completed = models.DateTimeField(null=True, blank=True, help_text="When the file was put in place.")

    class Meta:
        ordering = ["created"]
        indexes = [models.Index(fields=["user", "datacenter"]), models.Index(fields=["updated"])]

    def __str__(self) -> str:
        return f"upload {self.id} -> {self.path}"


class StorageReservation(models.Model):
    """Bytes promised to one write in progress (a one-shot upload, a copy, an archive being
    unpacked, a resumable upload), made under the owner's StorageUsage row lock, so writers
    racing for the last bytes of a quota cannot all be admitted. Settled into used_bytes (or
    dropped) when the write ends; one left by a crashed process is dropped by housekeeping."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="storage_reservations")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE, related_name="+")
    upload = models.OneToOneField(UploadSession, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="reservation")
    bytes = models.BigIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["user", "datacenter"])]

    def __str__(self) -> str:
        return f"{self.user} @ {self.datacenter}: {self.bytes} bytes reserved"


class ShareLink(models.Model):
    """Anyone with the link may download one file (the original service's `publish`)."""

    uuid = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="pfs_shares")
    path = models.CharField(max_length=4096)
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)
    downloads = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.path} ({self.uuid})"
