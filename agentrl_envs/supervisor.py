"""Restarting the workers of a local stack when they die (``agentrl-envs up``, :class:`~.stack.LocalStack`).

A :class:`Supervisor` is a thread that polls the processes it watches. When one exits (a crash,
SIGKILL, the OOM killer; any exit it was not asked for) it is started again with the same command
line, environment and port after a backoff: ``backoff_s``, doubled for each earlier exit within
``window_s``, at most ``max_backoff_s``. One that exits ``max_crashes`` times within ``window_s``
is given up: not started again, and :attr:`Supervisor.failure` says which, how it last exited and
how its log ends. Every exit, restart and give-up is told to ``report`` (one line each, the give-up
with the log's tail).

What its sessions become is the controller's part (docs/protocol.md): steps in flight fail
``task error`` at once; the rest end ``task error`` when the new run registers with a new heartbeat
``id``, or when a step finds the worker gone, whichever comes first.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RestartPolicy:
    """When a supervised process that exited is started again, and when it is given up.

    Parameters:
        max_crashes: exits within ``window_s`` that give the process up (the last is not restarted).
        window_s: the window the exits are counted in, seconds.
        backoff_s: the delay before the first restart, doubled for each earlier exit in the window.
        max_backoff_s: the longest delay.
    """

    max_crashes: int = field(default=5, metadata={"help": "exits within window_s that give a worker up"})
    window_s: float = field(default=60.0, metadata={"help": "the window exits are counted in (s)"})
    backoff_s: float = field(default=0.5, metadata={"help": "first restart's delay (s); doubles per exit in the window"})
    max_backoff_s: float = field(default=10.0, metadata={"help": "the longest delay before a restart (s)"})

    def __post_init__(self) -> None:
        if self.max_crashes < 1 or self.window_s <= 0 or self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ValueError(f"RestartPolicy{self!r}: needs max_crashes >= 1, window_s > 0 and 0 <= backoff_s <= max_backoff_s")

    def delay(self, exits_in_window: int) -> float:
        """The delay before restarting a process that exited ``exits_in_window`` times in the window (>= 1)."""
        return min(self.backoff_s * 2 ** (exits_in_window - 1), self.max_backoff_s)


def describe_exit(returncode: int | None) -> str:
    """``exit code 1``, ``signal SIGKILL``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class _Watched:
    name: str
    proc: Any  # a ManagedProcess: .alive(), .proc.returncode, .log_tail(), .log_path
    restart: Callable[[], Any]  # starts it again; returns the new ManagedProcess
    started: float = field(default_factory=time.monotonic)
    exits: deque[float] = field(default_factory=deque)
    restart_at: float | None = None
    restarts: int = 0
    given_up: str | None = None


class Supervisor:
    """Restarts the processes it watches (see the module docstring); :meth:`stop` ends the watch."""

    def __init__(self, policy: RestartPolicy, report: Callable[[str], None], poll_s: float = 0.2) -> None:
        self.policy = policy
        self.report = report
        self.poll_s = poll_s
        self.failure: str | None = None  # set when a process is given up
        self._watched: list[_Watched] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, name: str, proc: Any, restart: Callable[[], Any]) -> None:
        self._watched.append(_Watched(name, proc, restart))

    def restarts(self, name: str) -> int:
        """How many times process ``name`` was started again."""
        return sum(w.restarts for w in self._watched if w.name == name)

    def start(self) -> Supervisor:
        self._thread = threading.Thread(target=self._run, name="stack-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the watch (a restart under way finishes first): nothing is started after this returns."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            for w in self._watched:
                if self._stop.is_set():
                    return
                try:
                    self._check(w, time.monotonic())
                except Exception as e:  # noqa: BLE001 - a failed restart counts as an exit; the watch goes on
                    self.report(f"{w.name}: restarting it failed: {e!r}")
                    w.restart_at = None

    def _check(self, w: _Watched, now: float) -> None:
        if w.given_up is not None:
            return
        if w.restart_at is None:
            if w.proc.alive():
                return
            self._exited(w, now)
        elif now >= w.restart_at:
            w.restart_at = None
            w.proc = w.restart()
            w.started = time.monotonic()
            w.restarts += 1
            self.report(f"{w.name}: restarted (restart {w.restarts})")

    def _exited(self, w: _Watched, now: float) -> None:
        p = self.policy
        how = describe_exit(w.proc.proc.returncode)
        w.exits.append(now)
        while w.exits and now - w.exits[0] > p.window_s:
            w.exits.popleft()
        n = len(w.exits)
        if n >= p.max_crashes:
            w.given_up = (
                f"{w.name} exited {n} times within {p.window_s:.0f} s (the last: {how}, after {now - w.started:.1f} s); "
                f"given up, not restarted again. The end of its log ({w.proc.log_path}):\n{w.proc.log_tail(15)}"
            )
            self.failure = self.failure or w.given_up
            self.report(w.given_up)
            return
        delay = p.delay(n)
        w.restart_at = now + delay
        self.report(
            f"{w.name} exited ({how}) after {now - w.started:.1f} s; restarting it in {delay:.1f} s "
            f"({n} of {p.max_crashes} exits within {p.window_s:.0f} s give it up; log: {w.proc.log_path})"
        )
