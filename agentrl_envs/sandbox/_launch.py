"""Start one bubblewrap sandbox: the launch path of the bubblewrap backend (``exec`` is ``_enter.py``).

Usage: ``python -I .../sandbox/_launch.py MODE CGROUP_PROCS_FILES(colon-separated) NPROC DATA_BYTES LOWER UPPER WORK MERGED -- BWRAP_ARGV...``
or ``python -I .../sandbox/_launch.py probe`` (exit 0 when ``userns`` mode can run here, else print why).

Run it as a file with ``-I``, never with ``-m``: it must stay single-threaded (``unshare`` of a user
namespace fails in a multithreaded process) and it imports only the standard library.

``MODE`` is ``root`` (the worker is root with every capability: the overlay is mounted in a private
mount namespace of the host's user namespace, as ``unshare --mount`` did) or ``userns`` (the worker
is an ordinary user, e.g. the socket-free OS worker container: this process first enters a new user
namespace where its own uid and gid are root and, when ``newuidmap``/``newgidmap`` and an
``/etc/subuid``/``/etc/subgid`` range of its user exist, ids 1..N are that range, so init and check
scripts (which ``_enter.py`` runs in this namespace) may ``chown`` to other users as they can on a
host; without a range only root is mapped. Bubblewrap's own namespace inside maps root alone in
both modes. The overlay is mounted there, which Linux allows an unprivileged user since 5.11).
Then it writes its pid into every cgroup ``procs`` file (before entering a user namespace: that
needs the host's view), sets ``RLIMIT_NPROC`` and ``RLIMIT_DATA`` when given (> 0), mounts the
overlay at ``MERGED`` and execs bubblewrap.

``python -I _launch.py rm DIR``: remove ``DIR`` from inside such a user namespace (files that
scripts gave to other users are out of the worker's reach outside it).

In ``userns`` mode ``RLIMIT_NPROC`` is a per-session process limit: Linux counts processes per user
namespace and uid (and checks every enclosing namespace against the limit it had when the inner one
was made), and each session has its own namespace; root inside a user namespace is not exempt. It is
set once the namespace exists, so the worker's own processes are not counted against it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {fstype or ''} on {target}")


def subordinate_range(path: str, uid: int) -> tuple[int, int] | None:
    """``(start, count)`` of the first range of ``uid``'s user in ``/etc/subuid``-style ``path``."""
    import pwd

    try:
        names = {str(uid), pwd.getpwuid(uid).pw_name}
    except KeyError:
        names = {str(uid)}
    try:
        with open(path) as f:
            for line in f:
                parts = line.strip().split(":")
                if len(parts) == 3 and parts[0] in names and parts[1].isdigit() and parts[2].isdigit():
                    return int(parts[1]), min(int(parts[2]), 65536)
    except OSError:
        pass
    return None


def _helpers_available() -> bool:
    import shutil

    return all(shutil.which(t) for t in ("newuidmap", "newgidmap"))


def enter_own_user_namespace(extra_flags: int = 0) -> None:
    """Unshare a user namespace (and ``extra_flags``) in which this process's uid and gid are 0,
    and 1..N a subordinate range of its user when there is one (see the module doc)."""
    uid, gid = os.getuid(), os.getgid()
    ranges = (subordinate_range("/etc/subuid", uid), subordinate_range("/etc/subgid", uid))
    if uid != 0 and None not in ranges and _helpers_available():
        (us, uc), (gs, gc) = ranges  # type: ignore[misc]
        ready_r, ready_w = os.pipe()
        helper = os.fork()
        if helper == 0:  # waits until the parent has its namespace, then maps it from outside
            os.close(ready_w)
            os.read(ready_r, 1)
            import subprocess

            pid = str(os.getppid())
            rc = subprocess.run(["newuidmap", pid, "0", str(uid), "1", "1", str(us), str(uc)]).returncode
            rc = rc or subprocess.run(["newgidmap", pid, "0", str(gid), "1", "1", str(gs), str(gc)]).returncode
            os._exit(rc)
        os.close(ready_r)
        try:
            _check(_libc.unshare(CLONE_NEWUSER | extra_flags), "unshare(CLONE_NEWUSER)")
        finally:
            os.write(ready_w, b"x")
            os.close(ready_w)
        _, status = os.waitpid(helper, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise OSError(1, f"newuidmap/newgidmap could not map this namespace (exit {os.waitstatus_to_exitcode(status)})")
        return
    _check(_libc.unshare(CLONE_NEWUSER | extra_flags), "unshare(CLONE_NEWUSER)")
    # An unprivileged process may map its own ids, its gid only once setgroups is denied.
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def remove_tree(path: str) -> int:
    """``rm DIR``: remove ``path`` as root of a user namespace mapped as the sandboxes' are."""
    import shutil

    enter_own_user_namespace()
    shutil.rmtree(path, ignore_errors=True)
    return 0 if not os.path.lexists(path) else 1


def probe() -> int:
    """Can ``userns`` mode run here? A user namespace with a mount and a pid namespace, and a fresh
    ``/proc`` mounted in it (what bubblewrap needs); 0 if so, else 1 and the reason on stderr."""
    try:
        enter_own_user_namespace(CLONE_NEWNS | CLONE_NEWPID)
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    except OSError as e:
        print(f"no user namespace for the sandbox: {e}", file=sys.stderr)
        return 1
    child = os.fork()  # the first child is the new pid namespace's init
    if child == 0:
        try:
            _mount("tmpfs", "/tmp", "tmpfs", 0, None)
            os.mkdir("/tmp/proc")
            _mount("proc", "/tmp/proc", "proc", 0, None)
        except OSError as e:
            print(f"cannot mount /proc in a user namespace: {e}", file=sys.stderr)
            os._exit(2)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 3


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        return probe()
    if argv[:1] == ["rm"]:
        return remove_tree(argv[1])
    mode, procs, nproc, data, lower, upper, work, merged = argv[:8]
    if argv[8] != "--":
        raise SystemExit("usage: _launch.py MODE PROCS NPROC DATA LOWER UPPER WORK MERGED -- ARGV...")
    cmd = argv[9:]
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # bubblewrap keeps it (not setuid)
    for f in filter(None, procs.split(":")):
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    if mode == "userns":
        enter_own_user_namespace(CLONE_NEWNS)
        opts += ",userxattr"  # trusted.* xattrs are the host root's; overlay keeps its own in user.*
    else:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    if int(nproc) > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))
    if int(data) > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (int(data), int(data)))
    _mount("overlay", merged, "overlay", 0, opts)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as e:
        print(f"sandbox launch failed: {e}", file=sys.stderr)
        sys.exit(98)
