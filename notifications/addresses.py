"""Which URLs a webhook may reach. A webhook makes the server send requests where a user says, so
without a check any user could probe the service's own network (SSRF): only http(s) to public
addresses, unless the operator sets WEBHOOK_ALLOW_PRIVATE. The address is checked when sending
too, and the request goes to the very address checked, so a name that changes what it resolves
to between the check and the connection (DNS rebinding) gains nothing."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings


class AddressRefused(ValueError):
    """The URL is not one a webhook may reach (the message says why, for the user)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as in the URL (for the Host header and the TLS certificate check)
    port: int
    path: str  # with the query
    address: str  # the checked IP address to connect to


def _split(url: str) -> tuple[str, str, int, str]:
    if len(url) > 500:
        raise AddressRefused("use at most 500 characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise AddressRefused(f"not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise AddressRefused("use an http:// or https:// URL")
    if not parts.hostname:
        raise AddressRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused("put no user name or password in the URL; check the signature instead")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise AddressRefused("the URL holds spaces or control characters")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


def _allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def resolve(url: str) -> Target:
    """The URL's parts and an address of its host it may be sent to; AddressRefused if none."""
    scheme, host, port, path = _split(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise AddressRefused(f"cannot resolve {host} ({e})") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    # Every address must pass: the name's owner chooses which one a connection would use.
    if not settings.WEBHOOK_ALLOW_PRIVATE and not all(_allowed(a) for a in addresses):
        raise AddressRefused(f"{host} is a private, loopback or reserved address; webhooks go to public addresses")
    return Target(scheme, host, port, path, str(addresses[0]))


def check_url(url: str) -> None:
    resolve(url)
