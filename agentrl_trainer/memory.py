"""Hand freed memory back to the operating system between the phases of a CPU run.

glibc keeps what a thread frees in that thread's malloc arena; a training step's activations
(~2 MB a token on the CPU, see :func:`agentrl_trainer.batch.micro_batches`), freed on one thread,
stay resident while the engines' threads allocate in their own arenas, so a process's RSS grows
to the sum of every arena's peak. Measured: after a 4 x 1,024-token forward/backward of
SmolLM2-135M + LoRA the process held 5.8 GB with its tensors freed, 1.0 GB after ``malloc_trim(0)``;
a five-task ablation run was OOM-killed at 23 GB RSS in its final evaluation, the same run's
demo at 18.8 GB survived.

Trimming after a phase does not lower the peak *within* it. glibc serves allocations under its
mmap threshold from the heap, and raises that threshold (up to 32 MB) each time a larger block
is freed, so a training step's many 1-12 MB tensors end up in heap chunks that fragment: one
step of the demo on a real batch (``benchmarks/train_step.py``'s saved batch 2, 4,096-token
micro-batches, activations recomputed) peaked 4.82 GB above the process's RSS before it, of
which ~1.5 GB live. :func:`bound_heap_fragmentation` fixes the threshold at 1 MiB (glibc's
``mallopt(M_MMAP_THRESHOLD)``): blocks of 1 MiB and more are then mapped and unmapped, back to
the OS when freed. Measured on that step: +1.81 GB (256 KiB: +1.55 GB), for 27% more CPU time
(page faults of the fresh mappings; 256 KiB: 50%). The CPU demo and sweeps call it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import threading
from typing import Any

__all__ = ["TreeMemory", "bound_heap_fragmentation", "release_freed_memory", "tree_rss"]


@functools.cache
def _libc(function: str) -> Any:
    """The C library's ``function`` (glibc's malloc tuning), or None where it has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return getattr(libc, function, None)
    except OSError:
        return None


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def bound_heap_fragmentation(threshold: int = 1 << 20) -> bool:
    """Serve allocations of ``threshold`` bytes and more with their own mappings, returned to the
    OS when freed (glibc's ``mallopt(M_MMAP_THRESHOLD, threshold)``, which also stops glibc from
    raising the threshold by itself; see the module doc). Process-wide, for every thread from
    now on; False (and nothing done) where the C library has no ``mallopt`` or refuses."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def release_freed_memory() -> bool:
    """Collect garbage and return freed heap pages to the OS (glibc's ``malloc_trim``); False
    where the C library has no such call (musl, macOS), which then is a no-op."""
    gc.collect()
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)  # type: ignore[operator]
    return True


def tree_rss(root: Any = None) -> tuple[int, int, int]:
    """``(RSS of root, summed RSS of its descendants, processes listed)`` now, in bytes; ``root``:
    a ``psutil.Process`` (default: this one). A process that ends between the listing and the
    read is skipped."""
    import psutil

    root = root if root is not None else psutil.Process()
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        kids = []
    total = 0
    for p in kids:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # ended between the listing and the read
            continue
    return root.memory_info().rss, total, 1 + len(kids)


class TreeMemory:
    """Samples the resident memory of this process and all its descendants (the embedded
    controller and workers, their sandboxes) every ``every_s`` seconds on a thread of its own, and
    keeps the peak: the figure a machine must hold for a run. RSS is summed over the processes, so
    pages they share count once per process (an upper bound). ``phase`` labels what runs now; the
    peak records the phase it was seen in.

    ``with TreeMemory() as m: ...`` then ``m.record()`` (JSON-ready).
    """

    def __init__(self, every_s: float = 1.0) -> None:
        import psutil

        self.every_s = every_s
        self.phase = "start"
        self.peak_bytes = 0
        self.peak_phase = ""
        self.peak_processes = 0
        self.samples = 0
        self._root = psutil.Process()
        self._peaks_by_phase: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """One sample now (bytes); updates the peaks."""
        own, kids, processes = tree_rss(self._root)
        total = own + kids
        self.samples += 1
        phase = self.phase
        self._peaks_by_phase[phase] = max(self._peaks_by_phase.get(phase, 0), total)
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_phase, self.peak_processes = total, phase, processes
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sample()

    def record(self) -> dict[str, object]:
        """The peak of the whole process tree's RSS, in GB, with when and how it was sampled."""
        return {
            "peak_rss_gb": self.peak_bytes / 1e9,
            "peak_phase": self.peak_phase,
            "peak_processes": self.peak_processes,
            "peak_rss_gb_by_phase": {k: v / 1e9 for k, v in self._peaks_by_phase.items()},
            "sampled_every_s": self.every_s,
            "samples": self.samples,
            "what": "sum of the RSS of this process and all its descendants (shared pages counted per process)",
        }
