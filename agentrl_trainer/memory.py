"""Hand freed memory back to the operating system between the phases of a CPU run.

glibc keeps what a thread frees in that thread's malloc arena; a training step's activations
(~2 MB a token on the CPU, see :func:`agentrl_trainer.batch.micro_batches`), freed on one thread,
stay resident while the engines' threads allocate in their own arenas, so a process's RSS grows
to the sum of every arena's peak. Measured: after a 4 x 1,024-token forward/backward of
SmolLM2-135M + LoRA the process held 5.8 GB with its tensors freed, 1.0 GB after ``malloc_trim(0)``;
a five-task ablation run was OOM-killed at 23 GB RSS in its final evaluation, the same run's
demo at 18.8 GB survived.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

__all__ = ["release_freed_memory"]


@functools.cache
def _malloc_trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return getattr(libc, "malloc_trim", None)  # glibc only
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Collect garbage and return freed heap pages to the OS (glibc's ``malloc_trim``); False
    where the C library has no such call (musl, macOS), which then is a no-op."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)  # type: ignore[operator]
    return True
