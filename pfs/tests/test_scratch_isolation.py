"""The service's partial data (upload parts, temporary files, the lock file) lies outside every
home and is mounted into no job: neither a sandboxed local job nor a Kubernetes pod reaches it."""

import json

import pytest

from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes.config import parse
from jobs.backends.kubernetes.layouts import layout_for
from jobs.backends.kubernetes.workloads import PodOptions
from jobs.tests.test_k8s_manifests import make_job
from jobs.tests.test_local_backend import submit
from pfs import uploads
from pfs.paths import PfsPath, home, scratch_parts
from tests.support import run_until_done

from .conftest import scratch

LOOK = """
import json, os
seen = [os.path.join(root, name) for root, dirs, files in os.walk("/pfs") for name in dirs + files]
reach = {p: os.path.exists(p) for p in (os.environ["SCRATCH"], "/pfs/local/.scratch")}
with open(os.path.join(os.environ["PADDLE_CHECKPOINT_DIR"], "seen.json"), "w") as f:
    json.dump({"seen": seen, "reach": reach}, f)
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_job_left_behind")
def test_a_sandboxed_job_cannot_see_the_parts_of_its_users_uploads(alice, home_dir):
    session = uploads.create(alice, "/pfs/local/home/alice/big.bin", 10)
    writer = uploads.ChunkWriter(session, 0, 5)
    writer.write([b"01234"])
    writer.finish()
    part = scratch(home_dir) / f"{session.id}.part"
    assert part.read_bytes() == b"01234"
    job = run_until_done(submit(alice, "look", {"train.py": LOOK}, mode="collective", pservers=0, trainers=1,
                                env={"SCRATCH": str(scratch(home_dir))}))
    assert job.state == "Succeeded", job.message
    found = json.loads((home(alice, "local").child("jobs", "look", "checkpoints", "seen.json")).disk.read_text())
    assert found["seen"] and not [p for p in found["seen"] if part.name in p or ".scratch" in p], found["seen"]
    assert not any(found["reach"].values()), found["reach"]


@pytest.mark.django_db
def test_pods_mount_nothing_that_holds_the_scratch_directory(alice):
    settings = parse("k8s", {"storage": {"kind": "nfs", "server": "nfs", "path": "/export", "sub_path": "pfs"}})
    job = make_job(alice, mode="collective", pservers=0, trainers=1)
    kept = "/".join(("pfs", "k8s", *scratch_parts(PfsPath("k8s", "home", "alice", ()))))
    objs = layout_for(settings).manifests(job, "ns", None, 0, PodOptions(manifests.image_for(job, settings),
                                                                         grace_seconds=5))
    subs = [m["subPath"] for o in objs if o["kind"] == "Job"
            for c in o["spec"]["template"]["spec"]["containers"] for m in c["volumeMounts"] if m["name"] == "pfs"]
    assert "pfs/k8s/home/alice" in subs
    assert not [s for s in subs if kept == s or kept.startswith(s.rstrip("/") + "/")], (kept, subs)
