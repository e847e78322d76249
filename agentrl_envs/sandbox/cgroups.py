"""Per-session resource limits through cgroups (v2 unified, or v1 ``memory`` + ``pids``).

Root's processes ignore ``RLIMIT_NPROC`` and ``RLIMIT_AS`` would break ordinary programs, so the
limits that stop a fork bomb or a memory hog are a cgroup's ``pids.max`` and memory limit. A
:class:`SessionCgroup` is one directory per controller hierarchy; the launcher writes its own pid
into every ``cgroup.procs`` before it execs the sandbox, so every process of the session is in it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from .base import SandboxLimits

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Parent of every session's cgroup, one per hierarchy.
GROUP = "agentrl-sandbox"


def _writable_dir(path: Path) -> bool:
    try:
        (path / GROUP).mkdir(exist_ok=True)
        return os.access(path / GROUP / "cgroup.procs", os.W_OK)
    except OSError:
        return False


def cgroup_parents(root: Path = CGROUP_ROOT) -> list[Path]:
    """The writable parent directories sessions' cgroups go under; ``[]`` if there are none.

    v2: ``<root>/agentrl-sandbox`` with ``memory`` and ``pids`` enabled for its children.
    v1: ``<root>/memory/agentrl-sandbox`` and ``<root>/pids/agentrl-sandbox``.
    """
    if (root / "cgroup.controllers").is_file():
        have = set((root / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= have or not _writable_dir(root):
            return []
        parent = root / GROUP
        try:
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            return []
        return [parent]
    parents = [root / c for c in ("memory", "pids")]
    if all((p / "cgroup.procs").is_file() and _writable_dir(p) for p in parents):
        return [p / GROUP for p in parents]
    return []


@dataclass
class SessionCgroup:
    """The cgroup directories of one session (one per hierarchy)."""

    dirs: list[Path]

    @classmethod
    def create(cls, parents: list[Path], name: str, limits: SandboxLimits) -> SessionCgroup:
        dirs = []
        mem = str(limits.memory_mb * 1024 * 1024)
        for parent in parents:
            d = parent / name
            d.mkdir()
            dirs.append(d)
            files = {p.name: p for p in d.iterdir()}
            if "memory.max" in files:  # v2
                files["memory.max"].write_text(mem)
                if "memory.swap.max" in files:
                    files["memory.swap.max"].write_text("0")
            if "memory.limit_in_bytes" in files:  # v1
                files["memory.limit_in_bytes"].write_text(mem)
                if "memory.memsw.limit_in_bytes" in files:
                    try:
                        files["memory.memsw.limit_in_bytes"].write_text(mem)
                    except OSError:
                        pass
            if "pids.max" in files:
                files["pids.max"].write_text(str(limits.pids))
            if "cpu.max" in files and limits.cpus:
                files["cpu.max"].write_text(f"{int(limits.cpus * 100_000)} 100000")
        return cls(dirs)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files:
            try:
                out |= {int(x) for x in f.read_text().split()}
            except OSError:
                pass
        return out

    def oom_killed(self) -> bool:
        """True if the kernel killed a process of the session for memory."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    text = (d / name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip() not in ("", "0"):
                        return True
        return False

    def kill_and_remove(self, timeout: float = 5.0) -> None:
        """SIGKILL every process left in the session's cgroups, then remove them. Never raises."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            removed = True
            for d in self.dirs:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    removed = False
            if removed or time.monotonic() > deadline:
                return
            time.sleep(0.01)
