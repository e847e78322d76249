"""Whether the worker process that made a sandbox still lives (for reaping what dead workers left).

A worker killed with SIGKILL runs no clean-up, so each backend records its owner on what it makes
(a session dir and cgroup name, container labels) and sweeps, at open and on a timer, whatever an
owner that is gone left. A process is named by its pid *and its start time* (clock ticks since
boot, ``/proc/PID/stat`` field 22): a pid alone may since belong to another process (a restarted
worker in a container is often pid 1 again), the pair never does.
"""

from __future__ import annotations

import os


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot; ``None`` if there is no such
    process or only its zombie (it has exited; its parent has not collected it yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may itself hold spaces and ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, start: int | None = None) -> bool:
    """True if process ``pid`` (of this pid namespace) runs and, when ``start`` is given, is the
    process that started then (not a later one that got the same pid)."""
    if pid <= 0:
        return False
    now = process_start_time(pid)
    return now is not None and (start is None or now == start)


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[4026531836]``): pids of other namespaces mean nothing here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def owner_token() -> str:
    """``<pid>-<start time>`` of this process: what a sandbox records as its owner."""
    return f"{os.getpid()}-{process_start_time(os.getpid()) or 0}"
