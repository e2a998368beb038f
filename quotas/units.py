"""Kubernetes-style resource quantities ("500m", "1Gi"), parsed by the official client."""

import math
import re
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

# parse_quantity also takes exponents and signs; users and Kubernetes manifests get plain forms.
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def _parse(value: str) -> Decimal:
    if not isinstance(value, str) or not _QUANTITY.match(value.strip()):
        raise ValueError
    quantity: Decimal = parse_quantity(value.strip())  # type: ignore[no-untyped-call]  # kubernetes is untyped
    return quantity


def cpu_millicores(value: str) -> int:
    """'500m' -> 500, '2' -> 2000. Raises ValueError with a message users can act on."""
    try:
        q = _parse(value)
    except ValueError:
        raise ValueError(f"'{value}' is not a CPU amount: use cores like 1 or 0.5, or millicores like 500m") from None
    milli = math.ceil(q * 1000)
    if milli <= 0:
        raise ValueError("CPU must be more than 0")
    return milli


def memory_bytes(value: str) -> int:
    """'1Gi' -> 1073741824. Raises ValueError with a message users can act on."""
    try:
        q = _parse(value)
    except ValueError:
        raise ValueError(
            f"'{value}' is not a memory amount: use a number with Ki, Mi or Gi, like 512Mi or 1Gi") from None
    n = math.ceil(q)
    if n < 2**20:
        raise ValueError("memory must be at least 1Mi")
    return n


def format_cpu(millicores: int) -> str:
    return f"{millicores / 1000:g}"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
