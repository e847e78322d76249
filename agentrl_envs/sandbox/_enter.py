"""Run a command inside a running sandbox (the ``exec`` path of the bubblewrap backend).

Usage: ``python -I .../sandbox/_enter.py PID USERNS_PID CGROUP_PROCS_FILES(colon-separated) CWD SECCOMP_FD -- ENV... -- ARGV...``
(``USERNS_PID``: the launcher whose user namespace to join first, in userns mode; 0 in root mode;
``SECCOMP_FD``: an open file holding the session's seccomp filter, classic BPF, from :mod:`.seccomp`)

Run it as a file, never with ``-m``: it must stay single-threaded to join the sandbox's mount
namespace, and importing the package could start threads (a BLAS pool). It imports only the
standard library.

Joins the namespaces of ``PID`` (the sandbox's init) and its root directory, drops every
capability outside Docker's default set (the sandbox's files may have been changed by the model:
nothing inside it runs with more than the sandbox's own root has), forks into the pid namespace,
loads the session's seccomp filter (with ``no_new_privs``, as bubblewrap does for the session's
shell) and execs ``ARGV`` with exactly ``ENV``. It waits for the child and exits with its status; if this
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
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    """Load a classic BPF seccomp program (an array of 8-byte ``struct sock_filter``)."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "loading the seccomp filter failed")


def _read_fd(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


_NS_ORDER = ("ipc", "uts", "net", "pid", "mnt")


def main(argv: list[str]) -> int:
    pid, userns_pid, procs, cwd = int(argv[0]), int(argv[1]), argv[2], argv[3]
    program = _read_fd(int(argv[4]))
    if not program or len(program) % 8:
        raise SystemExit("_enter.py: no seccomp program on SECCOMP_FD")
    rest = argv[6:]
    sep = rest.index("--")
    env_list, cmd = rest[:sep], rest[sep + 1 :]
    for f in filter(None, procs.split(":")):
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    paths = [f"/proc/{pid}/ns/{ns}" for ns in _NS_ORDER]
    if userns_pid:
        # userns mode: the launcher's user namespace first (this worker's uid owns it, so it gets
        # every capability there and over the sandbox's namespaces, which bubblewrap made inside
        # it); scripts then see the ids a root-mode script sees on the host.
        paths.insert(0, f"/proc/{userns_pid}/ns/user")
    fds = [os.open(p, os.O_RDONLY) for p in paths]
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
            load_seccomp(libc, program)
            os.execvpe(cmd[0], cmd, env)
        except OSError as e:
            os.write(2, f"cannot run {cmd[0]}: {e}\n".encode())
            os._exit(127)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
