"""The seccomp filter on every replica and runtime build (bwrap --seccomp), anchored on Docker's
default profile: the calls a process without capabilities has no business making are refused
with EPERM. Above all it cannot make a user namespace (where it would be root again, with a
kernel attack surface that unprivileged users otherwise never reach): unshare(2) and clone(2)
with a namespace flag are refused, and clone3(2), whose flags seccomp cannot read, answers
ENOSYS so that libc falls back to clone(2). Calls of another architecture's ABI (32-bit calls on
x86_64) kill the process: libseccomp's default for architectures the filter does not name.

Built with libseccomp (through pyseccomp) once per launcher, as BPF that bwrap loads.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os

import pyseccomp as sc

REFUSED = (
    # namespaces and mounts
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "chroot",
    # the kernel's keyring, BPF, performance counters, io_uring
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "userfaultfd",
    # kernels, modules, the machine
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module", "reboot",
    "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib",
    "ustat", "sysfs", "_sysctl", "vhangup", "iopl", "ioperm",
    # clocks, file handles
    "settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex", "open_by_handle_at", "name_to_handle_at",
)
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
# NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET


@functools.cache
def program() -> bytes:
    """The filter as BPF, for bwrap's --seccomp."""
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in REFUSED:
        with contextlib.suppress(RuntimeError, ValueError, OSError):  # not a call of this architecture
            f.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in CLONE_NAMESPACES:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with os.fdopen(os.memfd_create("seccomp"), "w+b") as out:  # libseccomp writes to a descriptor
        f.export_bpf(out)
        out.seek(0)
        return out.read()
