"""The seccomp filter every bubblewrap session runs under, in every launch mode.

One program, compiled once per process with libseccomp (through ``pyseccomp``) into classic BPF:

* every system call that ``containers/seccomp-userns.json`` refuses (bpf, keyrings, module and
  kexec loading, perf, io_uring, userfaultfd, clock and swap control, file handles, cross-process
  memory access, the new mount API, ...) fails with ``EPERM``, as in that profile;
* and, beyond it, no new namespace from inside a session: ``unshare``, ``setns``, and ``clone``
  with any ``CLONE_NEW*`` flag fail with ``EPERM``, ``clone3`` (whose flags a filter cannot read)
  fails with ``ENOSYS`` so the C library falls back to ``clone`` (what Docker's default profile
  does), and ``mount``, ``umount2`` and ``pivot_root`` fail with ``EPERM``. The sandbox's root has
  no ``CAP_SYS_ADMIN``; a user namespace of its own would give it one there, and with it the
  kernel's mount and namespace code. (The worker's container profile has to allow these calls:
  bubblewrap makes the session's namespaces with them, before this filter is loaded.)

Bubblewrap loads it (``--seccomp FD``) into the session's shell right before the shell starts;
``_enter.py`` loads it into every command it runs in a session (init and check scripts), so no
process of a session runs without it. Before this module, a session started by a worker on a host
(bubblewrap as root, e.g. ``make train-demo`` and CI) ran with no filter at all (``Seccomp: 0``,
issue 38 item 7): the profile came only from the OS worker's container.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import tempfile
from pathlib import Path

from .base import SandboxError

PROFILE = Path(__file__).resolve().parent.parent / "containers" / "seccomp-userns.json"
#: ``CLONE_NEW*`` flags (linux/sched.h): cgroup, uts, ipc, user, pid, net, mount.
CLONE_NEW_FLAGS = (0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00020000)
NAMESPACE_CALLS = ("unshare", "setns", "mount", "umount2", "pivot_root")


def refused_by_profile(profile: Path = PROFILE) -> list[str]:
    """The system calls a Docker-format profile refuses (its ``SCMP_ACT_ERRNO`` rules without
    conditions; the profile allows everything else)."""
    data = json.loads(profile.read_text())
    if data.get("defaultAction") != "SCMP_ACT_ALLOW":
        raise ValueError(f"{profile}: expected a deny-list profile (defaultAction SCMP_ACT_ALLOW)")
    names: list[str] = []
    for rule in data["syscalls"]:
        if rule.get("action") != "SCMP_ACT_ERRNO" or rule.get("args") or rule.get("includes") or rule.get("excludes"):
            raise ValueError(f"{profile}: only unconditional SCMP_ACT_ERRNO rules are supported, got {rule}")
        names += rule["names"]
    return names


@functools.cache
def session_filter() -> bytes:
    """The session filter as a classic BPF program (``struct sock_filter`` array), for
    ``bwrap --seccomp`` and ``_enter.py``. Raises :class:`SandboxError` if libseccomp is missing."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as e:  # pyseccomp loads libseccomp.so.2 at import
        raise SandboxError(
            f"the sandbox's seccomp filter needs libseccomp ({e}): pip install pyseccomp, apt-get install libseccomp2"
        ) from None
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in [*refused_by_profile(), *NAMESPACE_CALLS]:
        try:
            f.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError):
            pass  # a call this architecture does not have (the profile names every arch's)
    for flag in CLONE_NEW_FLAGS:  # arg 0 is clone's flags on x86_64 and aarch64
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def filter_fd() -> int:
    """A fresh memory file holding :func:`session_filter`, positioned at its start (each reader
    consumes one: bubblewrap reads to the end). The caller closes it once it is passed on."""
    fd = os.memfd_create("agentrl-seccomp", 0)
    try:
        os.write(fd, session_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
