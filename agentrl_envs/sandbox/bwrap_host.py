"""The host side of the bubblewrap backend (:mod:`.bwrap`): what it needs to run here, and the
sweep that removes what dead workers' sessions left.

* :func:`missing_requirements`, :func:`userns_problem`: why the backend cannot run on this host
  (each a message that says how to fix it), checked at ``open``.
* :func:`reap_stale_sessions`: the session dirs and cgroups whose worker is gone, removed with any
  process still in them (a session id names its worker: see :mod:`.owner`).
* :func:`helper_env`: the whole environment of the processes that start, enter or clean a sandbox.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .cgroups import SessionCgroup
from .owner import process_alive
from .rootfs import is_complete

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The launcher, run as a file with the standard library only (``_launch.py``).
LAUNCH = str(Path(__file__).with_name("_launch.py"))


def helper_env() -> dict[str, str]:
    """The whole environment of the processes that start or enter a sandbox (``_launch.py`` and
    bwrap, ``_enter.py``): the host's ``PATH`` and nothing else. Bubblewrap's ``--clearenv`` cleans
    only the command it runs; its own copy inside the sandbox (pid 1 of the session's pid
    namespace) keeps the environment it was started with, which ``/proc/1/environ`` shows to the
    session. Started from the worker's environment, that was the worker secret and any token or
    API key the worker held (issue 38, finding 1). ``PATH`` is the standard one, not the worker's
    (bubblewrap itself is started by its absolute path)."""
    return {"PATH": PATH}


def has_full_root() -> bool:
    """Root with every capability (``CapEff`` all set): what the ``root`` launch mode needs."""
    if os.geteuid() != 0:
        return False
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                return eff & (1 << 21) != 0  # CAP_SYS_ADMIN: mounts, namespaces, cgroups
    except OSError:
        pass
    return False


def missing_requirements(rootfs: Path, *, userns: bool = False) -> str | None:
    """Why the bwrap backend cannot run here (a message saying how to fix it), or ``None``."""
    if sys.platform != "linux":
        return "the bubblewrap sandbox needs Linux"
    if not userns and not has_full_root():
        return "the bubblewrap sandbox's root mode needs root with CAP_SYS_ADMIN; use userns mode otherwise"
    if shutil.which("bwrap") is None:
        return "`bwrap` not found: apt-get install -y bubblewrap (or run .ci/os-sandbox.sh)"
    if not is_complete(rootfs):
        return f"no root filesystem at {rootfs}: build it with `python -m agentrl_envs.sandbox.rootfs` (.ci/os-sandbox.sh)"
    return None


def userns_problem(base_dir: Path) -> str | None:
    """Why userns mode cannot run here, or ``None``: user namespaces with a fresh ``/proc``
    (a probe), and session dirs that can hold an overlay's upper layer (not on overlayfs)."""
    probe = subprocess.run([sys.executable, "-I", LAUNCH, "probe"], capture_output=True, text=True, timeout=30, env=helper_env())
    if probe.returncode != 0:
        return (
            f"{probe.stderr.strip() or 'the user-namespace probe failed'}. The unprivileged sandbox needs user "
            "namespaces (a seccomp profile that allows unshare/mount/setns: in a container, "
            "agentrl_envs/containers/seccomp-userns.json) and an unmasked /proc (docker run --security-opt "
            "systempaths=unconfined); `agentrl-envs up --backend docker` sets both for the OS worker"
        )
    try:
        fstype = _fs_type(base_dir)
    except OSError as e:
        return f"cannot inspect {base_dir}: {e}"
    if fstype == "overlay":
        return (
            f"the sandbox dir {base_dir} is on overlayfs, which cannot hold an overlay's upper layer: put "
            "AGENTRL_SANDBOX_DIR on a tmpfs or a volume (docker run --tmpfs /var/lib/agentrl-sandboxes:exec)"
        )
    return None


def _fs_type(path: Path) -> str:
    """The file system type of the mount ``path`` is on (longest matching mount point)."""
    best, kind = "", ""
    real = os.path.realpath(path)
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        mnt = fields[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, fields[2]
    return kind


def session_owner_alive(session_id: str) -> bool | None:
    """Whether the worker that made session ``session_id`` still runs; ``None`` if the id is not
    a session id (``<pid>-<start time>-<random>``, or an older version's ``<pid>-<random>``)."""
    parts = session_id.split("-")
    if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
        return process_alive(int(parts[0]), int(parts[1]) or None)
    if len(parts) == 2 and parts[0].isdigit():
        return process_alive(int(parts[0]))
    return None


def reap_stale_sessions(base_dir: Path, parents: list[Path], *, userns: bool = False) -> list[str]:
    """Remove the session dirs and cgroups whose worker is gone, killing any process left in
    them; return their session ids. A dir whose name is no session id is removed too (``base_dir``
    holds only sessions); a cgroup whose name is none is left alone."""
    reaped: set[str] = set()
    for d in base_dir.glob("*"):
        if session_owner_alive(d.name):
            continue
        SessionCgroup([p / d.name for p in parents if (p / d.name).is_dir()]).kill_and_remove()
        remove_session_dir(d, userns=userns)
        reaped.add(d.name)
    for parent in parents:
        for g in parent.iterdir() if parent.is_dir() else ():
            if not g.is_dir() or g.name in reaped or session_owner_alive(g.name) is not False:
                continue
            SessionCgroup([p / g.name for p in parents if (p / g.name).is_dir()]).kill_and_remove()
            reaped.add(g.name)
    return sorted(reaped)


def remove_session_dir(path: Path, *, userns: bool = False) -> None:
    """Remove a session dir whatever its scripts did to it (unreadable dirs, files of other ids)."""
    with contextlib.suppress(OSError):
        os.rmdir(path / "merged")

    def unlock(func: object, p: str, exc: object) -> None:
        # Without CAP_DAC_OVERRIDE (userns mode) a dir the session made unreadable (overlay's own
        # work/work is mode 000) must be opened up first; it is ours, so chmod works.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)

    shutil.rmtree(path, onerror=unlock)
    if path.exists() and userns:
        # Files scripts gave to other users (their ids are the worker's subordinate range).
        subprocess.run([sys.executable, "-I", LAUNCH, "rm", str(path)], capture_output=True, timeout=120, env=helper_env())
