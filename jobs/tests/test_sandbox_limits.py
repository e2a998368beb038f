"""What a replica may not do even inside its sandbox, tried for real in this run's mode (root or
rootless): make a namespace of its own or reach the kernel's riskier calls (the seccomp filter),
and write without end to its working copy or /tmp (the disk limit)."""

import json
import platform

import pytest

from jobs.live import logstore
from jobs.tests.test_local_backend import run_until_done, submit
from jobs.tests.test_sandbox import set_config, work_dir

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

# Numbers of calls libc has no wrapper for, on the architectures this runs on.
SYSCALLS = {"x86_64": {"bpf": 321, "keyctl": 250, "perf_event_open": 298, "kexec_load": 246, "init_module": 175},
            "aarch64": {"bpf": 280, "keyctl": 219, "perf_event_open": 241, "kexec_load": 104, "init_module": 105}}

CALLS = r"""
import ctypes, errno, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
result = {}
def attempt(name, call):
    ctypes.set_errno(0)
    rc = call()
    result[name] = "allowed" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
attempt("unshare user", lambda: libc.unshare(CLONE_NEWUSER))
attempt("unshare mount", lambda: libc.unshare(CLONE_NEWNS))
attempt("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
for name, number in json.loads(sys.argv[1]).items():
    attempt(name, lambda n=number: libc.syscall(n, 0, 0, 0, 0, 0))
done = subprocess.run(["unshare", "-Ur", "id", "-u"], capture_output=True, text=True)
result["unshare -Ur"] = (done.returncode, done.stdout.strip(), done.stderr.strip())
result["fork"] = "allowed" if os.fork() or os._exit(0) else ""
print(json.dumps(result), flush=True)
"""


def test_a_job_cannot_make_namespaces_or_reach_the_kernels_risky_calls(alice):
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        pytest.skip(f"no syscall numbers for {platform.machine()}")
    job = run_until_done(submit(alice, "calls", {"train.py": CALLS}, mode="collective", pservers=0, trainers=1,
                                entry=f"python train.py '{json.dumps(numbers)}'"))
    assert job.state == "Succeeded", job.message
    result = json.loads(logstore.read(job.replicas.get()).text.strip().splitlines()[-1])
    returncode, out, err = result.pop("unshare -Ur")
    assert returncode != 0 and out == "" and "Operation not permitted" in err
    assert result.pop("fork") == "allowed"  # what a program needs still works
    assert result == {name: "EPERM" for name in ["unshare user", "unshare mount", "mount", *numbers]}


FILL = r"""
import os, sys
where = sys.argv[1]
with open(os.path.join(where, "fill"), "wb") as f:
    block = b"x" * (1 << 20)
    for i in range(1 << 20):
        f.write(block)
        f.flush()
        if i % 16 == 0:
            print("wrote", i + 1, "MiB", flush=True)
"""


PROGRAMS = {"many files": "for i in range(1 << 20):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n",
            # no block at all, only inodes: each counts as 4 KiB
            "empty files": "for i in range(1 << 20):\n    open(f'e{i}', 'wb').close()\n"}


@pytest.mark.parametrize("where", ["work", "tmp", "many files", "empty files"])
def test_a_replica_that_writes_without_end_is_stopped_with_disk_limit(alice, where):
    set_config(disk_limit="48Mi")
    program = PROGRAMS.get(where, FILL)
    target = {"tmp": "/tmp"}.get(where, ".")
    job = run_until_done(submit(alice, "fill", {"train.py": program}, mode="collective", pservers=0, trainers=1,
                                entry=f"python train.py {target}"), timeout=120)
    replica = job.replicas.get()
    assert (job.state, replica.state, replica.reason) == ("Failed", "Failed", "DiskLimit"), replica.message
    assert "48 MiB" in replica.message
    # Its working copy and /tmp are emptied, so nothing of what it wrote fills the disk after it.
    left = sorted(p.name for p in work_dir(job).iterdir())
    assert left == [], left
