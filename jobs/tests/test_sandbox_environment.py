"""A job's environment in the local sandbox, tried as a hostile user would: the variables the
dynamic loader obeys (LD_PRELOAD above all) are the user's to set, so they must reach the program,
which runs as the job uid, and nothing that runs as root while the sandbox is built (setpriv)."""

import shutil
import subprocess

import pytest

from jobs.backends.local import sandbox
from jobs.live import logstore
from jobs.tests.test_local_backend import submit
from launcher.sandbox import ROOTLESS_UID
from pfs.paths import home
from tests.support import ROOT, run_until_done

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

# Says, from inside every program the loader starts with it, which uid that program runs as.
PRELOAD = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void said(void) {
    fprintf(stderr, "preloaded into uid %d\n", (int)getuid());
}
"""


def test_a_jobs_ld_preload_runs_only_as_the_job_uid_never_as_root(alice, tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("gcc builds the preloaded library")
    source = tmp_path / "said.c"
    source.write_text(PRELOAD)
    job = submit(alice, "preload", {"train.py": "print('trained', flush=True)\n"}, mode="collective", pservers=0,
                 trainers=1, env={"LD_PRELOAD": "/pfs/local/home/alice/jobs/preload/said.so"})
    package = home(alice, "local").child("jobs", "preload").disk
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(package / "said.so"), str(source)], check=True)
    package.chmod(0o755)  # readable by anyone, root in the sandbox included
    job = run_until_done(job)
    assert job.state == "Succeeded", job.message
    log = logstore.read(job.replicas.get()).text
    uids = {int(line.rsplit(" ", 1)[1]) for line in log.splitlines() if line.startswith("preloaded into uid ")}
    assert "trained" in log
    # The program got the user's LD_PRELOAD (the job uid; rootless the sandbox's own uid), and no
    # program before it did as root.
    assert uids == {sandbox.job_uid(alice) if ROOT else ROOTLESS_UID}, log

