"""Memory settings of the whole worker process, for the SQLite backend (all process-wide by
nature: SQLite's heap limit and glibc's allocator are shared by every thread of the process).

A session's SQLite database lives in the worker's heap, allocated and freed on the session's own
thread, so in that thread's glibc arena. Two things kept that memory after the session ended
(issue 38: a worker stayed at 814 MiB after a session that had filled 1.7 GiB):

* ``free`` keeps freed memory for reuse; :func:`release_freed_memory` (``malloc_trim(0)``) hands
  the free pages of every arena back to the system, after a database is closed.
* ``malloc_trim`` does not shrink a thread arena's top chunk, and once a large block (a 16 MB
  blob) has been freed, glibc raises its trim threshold up to 64 MiB, so that much could stay at
  the top of an arena (seen: 30 MiB left after six sessions had ended).
  :func:`return_freed_memory_eagerly` fixes the threshold at glibc's default, 128 KiB, which also
  stops that raise.

On a C library without these calls (musl) both do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sqlite3
from typing import Any

#: glibc's ``mallopt`` parameter (malloc.h) and its default trim threshold.
_M_TRIM_THRESHOLD = -1
TRIM_THRESHOLD_BYTES = 128 * 1024


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


_LIBC = _libc()


def release_freed_memory() -> None:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim(0)``)."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def return_freed_memory_eagerly() -> None:
    """Fix glibc's trim threshold at :data:`TRIM_THRESHOLD_BYTES`: ``free`` then returns an
    arena's top to the system as soon as that much is free there."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


def set_sqlite_heap_limit(limit_bytes: int) -> int:
    """Lower SQLite's hard heap limit, which bounds the memory of every SQLite connection of the
    process together, to ``limit_bytes`` (0: leave it); returns the limit in force. SQLite's
    PRAGMA only ever lowers it (or sets it where there is none), so the lowest asked for holds."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        if limit_bytes > 0:
            conn.execute(f"PRAGMA hard_heap_limit = {int(limit_bytes)}")
        return conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
