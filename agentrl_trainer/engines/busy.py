"""Busy time of an engine that serves overlapping requests (for the engine idle fraction)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BusyClock"]


class BusyClock:
    """Wall time with at least one request in flight; ``seconds`` includes the open busy period."""

    def __init__(self) -> None:
        self._done = 0.0  # closed busy periods
        self._inflight = 0
        self._since = 0.0

    @property
    def seconds(self) -> float:
        open_period = time.monotonic() - self._since if self._inflight else 0.0
        return self._done + open_period

    @contextmanager
    def busy(self) -> Iterator[None]:
        if self._inflight == 0:
            self._since = time.monotonic()
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._done += time.monotonic() - self._since
