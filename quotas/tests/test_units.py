import os
import subprocess
import sys

import pytest
from django.conf import settings
from kubernetes.utils.quantity import parse_quantity

from quotas.units import cpu_millicores, memory_bytes, quantity

PLAIN = ["1", "0.5", "500m", "1.5", "2k", "3M", "4G", "5T", "6P", "7E", "1Ki", "512Mi", "1Gi", "1.5Gi", "2Ti",
         "3Pi", "4Ei", "0.001m", "123456789012345678901234567890", "1.0000000000000000000000000001Ei", " 1Gi "]


@pytest.mark.unit
@pytest.mark.parametrize("value", PLAIN)
def test_plain_quantities_parse_as_the_kubernetes_client_parses_them(value):
    ours = quantity(value)
    theirs = parse_quantity(value.strip())
    assert ours == theirs and str(ours) == str(theirs)


@pytest.mark.unit
@pytest.mark.parametrize("value", ["", "1e3", "-1", "+1", "1ki", "1Kib", "m", "1.", ".5", "1 Gi", "0x10", None, 5])
def test_anything_but_a_plain_quantity_is_refused(value):
    with pytest.raises(ValueError):
        quantity(value)


@pytest.mark.unit
def test_users_get_millicores_and_bytes_rounded_up():
    assert cpu_millicores("0.0005") == 1 and cpu_millicores("2") == 2000 and cpu_millicores("250m") == 250
    assert memory_bytes("1Gi") == 2**30 and memory_bytes("1.5Mi") == 3 * 2**19
    with pytest.raises(ValueError, match="is not a memory amount"):
        memory_bytes("1e9")


def test_the_local_backend_runs_without_loading_the_kubernetes_client():
    """A local-only install never imports the Kubernetes client (jobs/backends/registry.py)."""
    code = ("import sys, django; django.setup()\n"
            "from jobs.backends.registry import backend_class, capacity\n"
            "from accounts.models import Datacenter\n"
            "backend_class('local'); capacity(Datacenter(name='x', backend='local'))\n"
            "from jobs.backends.local import backend, keepers, replicas, runtime\n"
            "from jobs import tasks, watch, services\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=settings.BASE_DIR, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "DJANGO_SETTINGS_MODULE": "paddleweb.test_settings"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"

