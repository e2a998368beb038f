"""Kubernetes-style resource quantities ("500m", "1Gi"): the plain forms users and manifests
write, parsed as the Kubernetes client's parse_quantity does (quotas/tests/test_units.py holds the
two to the same answers) without loading that client."""

import math
import re
from decimal import Decimal

# Kubernetes also takes exponents and signs; users and Kubernetes manifests get plain forms.
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {"m": (1000, -1), "k": (1000, 1), "M": (1000, 2), "G": (1000, 3), "T": (1000, 4), "P": (1000, 5),
           "E": (1000, 6), "Ki": (1024, 1), "Mi": (1024, 2), "Gi": (1024, 3), "Ti": (1024, 4), "Pi": (1024, 5),
           "Ei": (1024, 6)}


def quantity(value: str) -> Decimal:
    """'500m' -> Decimal('0.5'), '1Ki' -> Decimal('1024'). ValueError if it is not a plain quantity."""
    m = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix is None:
        return number
    base, exponent = _SUFFIX[suffix]
    return number * (base ** Decimal(exponent))


def cpu_millicores(value: str) -> int:
    """'500m' -> 500, '2' -> 2000. Raises ValueError with a message users can act on."""
    try:
        q = quantity(value)
    except ValueError:
        raise ValueError(f"'{value}' is not a CPU amount: use cores like 1 or 0.5, or millicores like 500m") from None
    milli = math.ceil(q * 1000)
    if milli <= 0:
        raise ValueError("CPU must be more than 0")
    return milli


def memory_bytes(value: str) -> int:
    """'1Gi' -> 1073741824. Raises ValueError with a message users can act on."""
    try:
        q = quantity(value)
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
