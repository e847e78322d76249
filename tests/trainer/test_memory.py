"""release_freed_memory hands freed heap pages back: the process's RSS falls after it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from agentrl_trainer.memory import release_freed_memory


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and calls glibc's malloc_trim")
def test_freed_heap_pages_go_back_to_the_os() -> None:
    # many medium blocks below glibc's mmap threshold, freed on another thread: they stay in that
    # thread's arena (the case of a training step's activations) until trimmed
    held: list[bytearray] = []
    pins: list[bytes] = []  # small live objects between the big blocks: the heap cannot just shrink

    def allocate_and_free() -> None:
        for i in range(3000):
            block = bytearray(100_000)  # ~300 MB in blocks under glibc's mmap threshold
            block[::4096] = b"\x01" * len(block[::4096])  # touch every page
            held.append(block)
            pins.append(bytes(str(i) * 40, "ascii"))
        held.clear()

    t = threading.Thread(target=allocate_and_free)
    t.start()
    t.join()
    before = _rss_mb()
    assert release_freed_memory() is True
    after = _rss_mb()
    assert after < before - 100, (before, after)
    assert len(pins) == 3000
