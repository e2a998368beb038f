"""What a running job writes to its home counts against its user's storage quota while it runs:
real sandboxed jobs, real walks of the home, the watch loop's check."""

import pytest

from jobs.lifecycle.storage import StorageCheck
from jobs.live import logstore
from jobs.tasks import launch_job
from jobs.tests.test_local_backend import submit
from pfs import usage
from quotas.models import Quota
from tests.support import wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

WRITER = r"""
import os, sys, time
mib = int(sys.argv[1])
with open(os.path.join(os.environ["PADDLE_PFS_HOME"], "output.bin"), "wb") as f:
    f.write(b"x" * (mib << 20))
print("written", flush=True)
time.sleep(600)
"""


def run_writer(user, mib: int):
    job = submit(user, "writer", {"train.py": WRITER}, mode="collective", pservers=0, trainers=1,
                 entry=f"python train.py {mib}")
    launch_job(job.pk)
    wait_for(lambda: "written" in logstore.read(job.replicas.get()).text, 30, what="the job to write")
    return job


def test_a_running_jobs_home_writes_count_before_it_ends(alice, datacenter, settings):
    settings.STORAGE_CHECK_SECONDS = 0
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=64 << 20)
    job = run_writer(alice, 8)
    StorageCheck().tick()
    assert usage.get_usage(alice, datacenter).used_bytes >= 8 << 20
    job.refresh_from_db()
    assert job.state == "Running"  # under its quota: it goes on


def test_a_running_job_that_fills_its_home_past_the_quota_is_stopped(alice, datacenter, settings):
    settings.STORAGE_CHECK_SECONDS = 0
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=4 << 20)
    job = run_writer(alice, 8)
    StorageCheck().tick()
    job = wait_state(job, "Failed")
    assert job.reason == "StorageQuota"
    assert "over its quota of 4.0 MiB" in job.message, job.message
    assert usage.get_usage(alice, datacenter).used_bytes >= 8 << 20
