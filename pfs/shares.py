"""Share links (the original service's `publish`): anyone with `/filepub/?uuid=<uuid>` may
download one file, until the owner revokes the link or it expires. The path is checked again
on every download, as the owner, so a link never reaches further than its owner could."""

from __future__ import annotations

import os
import uuid as uuidlib
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.http import HttpResponseBase
from django.utils import timezone

from . import transfer
from .models import ShareLink
from .paths import PathError, resolve

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def create(user: User, path: str, *, expires: datetime | None = None) -> ShareLink:
    p = resolve(user, path)
    fd, _ = transfer.open_file(p)  # race-free: 404 missing, 403 a link or hard-linked, 409 not a file
    os.close(fd)
    if expires is not None and expires <= timezone.now():
        raise PathError("the expiry must be in the future")
    return ShareLink.objects.create(user=user, path=p.virtual, expires=expires)


def active(user: User) -> QuerySet[ShareLink]:
    now = timezone.now()
    return ShareLink.objects.filter(user=user, revoked=None).exclude(expires__lte=now)


def revoke(user: User, link_uuid: str) -> ShareLink:
    link = _get(link_uuid, user=user)
    if link.revoked is None:
        link.revoked = timezone.now()
        link.save(update_fields=["revoked"])
    return link


def _get(link_uuid: str, *, user: User | None = None) -> ShareLink:
    try:
        key = uuidlib.UUID(str(link_uuid))
        qs = ShareLink.objects.select_related("user")
        return qs.get(uuid=key, user=user) if user is not None else qs.get(uuid=key)
    except (ShareLink.DoesNotExist, ValueError):
        raise PathError("no such share link", 404) from None


def serve(link_uuid: str, *, range_header: str | None = None, if_range: str | None = None) -> HttpResponseBase:
    """The shared file, for anyone holding the link; 404 once revoked, 410 once expired."""
    link = _get(link_uuid)
    if link.revoked is not None:
        raise PathError("this share link was revoked", 404)
    if link.expires is not None and link.expires <= timezone.now():
        raise PathError("this share link has expired", 410)
    if not link.user.is_active:
        raise PathError("no such share link", 404)
    p = resolve(link.user, link.path)
    resp = transfer.file_response(p, range_header=range_header, if_range=if_range)
    ShareLink.objects.filter(pk=link.pk).update(downloads=link.downloads + 1)
    return resp


def url_of(link: ShareLink, base: str) -> str:
    return f"{base.rstrip('/')}/filepub/?uuid={link.uuid}"
