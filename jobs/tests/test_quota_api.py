import pytest

from jobs import services
from quotas.models import Quota
from tests.support import make_package

pytestmark = pytest.mark.django_db


def test_quota_shows_limits_and_what_admitted_jobs_use(alice, alice_api, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, cpu_millicores=4000, memory_bytes=8 * 2**30, gpus=0,
                         max_running_jobs=3)
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = {"package": pkg, "entry": "python train.py", "pservers": 1, "trainers": 2, "cpu": "500m", "memory": "1Gi",
           "pscpu": "1", "psmemory": "2Gi"}
    services.submit_job(alice, {"name": "fit", "fail_fast": True, **job})  # admitted at once
    services.submit_job(alice, {"name": "queued", **job})  # queued (no pass has run): holds nothing
    body = alice_api.get("/api/v2/quota/").json()
    assert body["datacenter"] == "local"
    assert body["limits"] == {"cpu_millicores": 4000, "memory_bytes": 8 * 2**30, "gpus": 0, "running_jobs": 3,
                              "queued_jobs": 1000}
    assert body["used"] == {"cpu_millicores": 2000, "memory_bytes": 4 * 2**30, "gpus": 0, "running_jobs": 1,
                            "queued_jobs": 1}


def test_the_datacenter_default_applies_without_a_quota_of_ones_own(bob_api, datacenter):
    Quota.objects.filter(datacenter=datacenter, user=None).update(gpus=2)
    assert bob_api.get("/api/v2/quota/").json()["limits"]["gpus"] == 2
    res = bob_api.get("/api/v2/quota/?datacenter=mars")
    assert res.status_code == 400 and "no datacenter named 'mars'" in res.json()["datacenter"][0]
