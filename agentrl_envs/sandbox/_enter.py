"""Run a command inside a running sandbox (the ``exec`` path of the bubblewrap backend).

Usage: ``python -I .../sandbox/_enter.py PID CGROUP_PROCS_FILES(colon-separated) CWD -- ENV... -- ARGV...``

Run it as a file, never with ``-m``: it must stay single-threaded to join the sandbox's mount
namespace, and importing the package could start threads (a BLAS pool). It imports only the
standard library.

Joins the namespaces of ``PID`` (the sandbox's init; its user namespace first when it has its own)
and its root directory, drops every
capability outside Docker's default set (the sandbox's files may have been changed by the model:
nothing inside it runs with more than the sandbox's own root has), forks into the pid namespace
and execs ``ARGV`` with exactly ``ENV``. It waits for the child and exits with its status; if this
process dies, the child is killed (parent-death signal). Host Python only: it never loads code
from the sandbox before the final exec.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# Docker's default capabilities (numbers from linux/capability.h).
KEEP_CAPS = {0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31}  # chown dac_override fowner fsetid kill setgid
# setuid setpcap net_bind_service net_raw sys_chroot audit_write setfcap
_PR_CAPBSET_DROP = 24
_PR_SET_PDEATHSIG = 1
_NS_ORDER = ("ipc", "uts", "net", "pid", "mnt")


def main(argv: list[str]) -> int:
    pid, procs, cwd = int(argv[0]), argv[1], argv[2]
    rest = argv[4:]
    sep = rest.index("--")
    env_list, cmd = rest[:sep], rest[sep + 1 :]
    for f in filter(None, procs.split(":")):
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    order = _NS_ORDER
    if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        # The sandbox's own user namespace first (bubblewrap made it; in userns mode it sits in the
        # launcher's, which this worker's uid owns): then the commands run as the shell's root
        # does, and joining the other namespaces needs no capability on the host.
        order = ("user", *_NS_ORDER)
    fds = [os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in order]
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY)
    for fd in fds:
        if libc.setns(fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")
        os.close(fd)
    os.fchdir(root)
    os.chroot(".")
    os.close(root)
    for cap in range(64):
        if cap not in KEEP_CAPS:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: ignored
    child = os.fork()
    if child == 0:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        env = dict(e.split("=", 1) for e in env_list)
        try:
            os.execvpe(cmd[0], cmd, env)
        except OSError as e:
            os.write(2, f"cannot run {cmd[0]}: {e}\n".encode())
            os._exit(127)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
