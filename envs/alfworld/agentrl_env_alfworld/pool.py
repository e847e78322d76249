"""Engine processes: ALFWorld games played in parallel, one worker process per core.

AgentBench runs every ALFWorld step of every session behind one global lock in the worker
process. Here a worker's sessions are spread over ``processes`` engine processes (default: one
per core). Each engine process keeps its :class:`~.engine.GameSlot` objects (one ``PddlEnv`` and
one ``libdownward`` copy each) for its whole life and hands a free one to each new session, so
nothing is created per game and memory stays flat; the engine's caches live per process.

A session stays on the process that started it (its game state lives there). A new session goes
to the process with the fewest sessions; processes start when first needed. ``processes=0`` runs
the engine in the worker process itself, on one thread.

Requests to one process are answered in order over a pipe; the worker's event loop waits for
them in a thread. A process that dies takes its sessions with it (each gets an
:class:`EngineError`, which the SDK reports as ``task error``); the next session starts a new one.

An engine process is a fresh interpreter (``python -m agentrl_env_alfworld._engine_process FD``), connected by a socket pair, not a ``multiprocessing`` child:
'spawn' re-imports the parent's ``__main__`` in the child, so a script without an ``if __name__
== "__main__":`` guard ran its top level again there, and a program read from stdin or ``python
-c`` (no main file at all) killed every engine at start; 'fork' would copy a threaded worker. This
way the gym env works from any plain script, notebook, stdin or ``-c``. The child exits when the
socket closes (its parent closed the pool, or died).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .engine import GameSlot, Observation


def available_cores() -> int:
    """The cores this process may run on (``taskset``, cgroup cpusets), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class EngineError(RuntimeError):
    """The engine process failed (died, or the engine raised): the session cannot go on."""


def load_game(source: dict[str, Any]) -> dict[str, Any]:
    """The ``.tw-pddl`` dict of a session's source: a generated game's spec or a game file."""
    if "game_file" in source:
        import json

        with open(source["game_file"]) as f:
            data = json.load(f)
        return {k: data[k] for k in ("pddl_domain", "grammar", "pddl_problem")}
    from .engine import game_data
    from .scenes import build_game

    game = build_game(source["spec"])
    return game_data(game.problem, game.goal, source.get("logic", "agentbench"))


class _Slots:
    """The game slots of one engine process, by id; slots are reused, never dropped."""

    def __init__(self) -> None:
        self.slots: dict[int, GameSlot] = {}
        self.free: list[int] = []

    def handle(self, op: str, slot: int, payload: Any) -> Any:
        if op == "start":
            if not self.free:
                self.free.append(len(self.slots))
                self.slots[len(self.slots)] = GameSlot()
            slot = self.free.pop()
            try:
                return slot, self.slots[slot].start(load_game(payload))
            except BaseException:
                self.free.append(slot)
                raise
        if op == "step":
            return self.slots[slot].step(payload)
        if op == "release":
            if slot not in self.free:
                self.free.append(slot)
            return None
        if op == "stats":
            return _process_stats(len(self.slots))
        raise ValueError(f"unknown engine request {op!r}")


def _process_stats(slots: int) -> dict[str, Any]:
    from .engine import install_caches

    stats: dict[str, Any] = {"pid": os.getpid(), "slots": slots}
    stats.update({f"cache_{k}": len(v) for k, v in install_caches().items()})
    try:
        with open("/proc/self/statm") as f:
            stats["rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        stats["open_files"] = len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        pass
    return stats


def _serve(conn: Any) -> None:
    """An engine process: answer ``(op, slot, payload)`` requests until the pipe closes."""
    slots = _Slots()
    while True:
        try:
            op, slot, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", slots.handle(op, slot, payload))
        except Exception as e:  # the engine's own failure, sent back as text
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send(reply)


def _child_env() -> dict[str, str]:
    """The environment of an engine process: this one's, with this interpreter's import path (a
    package made importable by ``sys.path`` edits in the parent is importable in the child too)."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class _Process:
    """One engine process and the socket to it; ``call`` sends one request and waits for its answer."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentrl_env_alfworld._engine_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=_child_env(),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(mine.detach())
        self.lock = threading.Lock()
        self.sessions = 0
        self.dead = False

    def call(self, op: str, slot: int = -1, payload: Any = None) -> Any:
        with self.lock:
            if self.dead:
                raise EngineError("the ALFWorld engine process is gone")
            try:
                self.conn.send((op, slot, payload))
                status, value = self.conn.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                self.dead = True
                raise EngineError(f"the ALFWorld engine process died ({e!r})") from None
        if status == "error":
            raise EngineError(value)
        return value

    def close(self) -> None:
        with self.lock:
            self.dead = True
            self.conn.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _InProcess:
    """``processes=0``: the engine in this process, one call at a time on one thread."""

    def __init__(self) -> None:
        self.slots = _Slots()
        self.lock = threading.Lock()
        self.sessions = 0
        self.dead = False

    def call(self, op: str, slot: int = -1, payload: Any = None) -> Any:
        with self.lock:
            try:
                return self.slots.handle(op, slot, payload)
            except Exception as e:
                raise EngineError(f"{type(e).__name__}: {e}") from e

    def close(self) -> None:
        self.dead = True


@dataclass
class Lease:
    """A session's game: which process holds it, and in which slot."""

    process: Any
    slot: int


class EnginePool:
    """Engine processes shared by one worker's sessions (``Task.open_resources``)."""

    def __init__(self, processes: int | None = None) -> None:
        self.size = available_cores() if processes is None else processes
        self._processes: list[Any] = []
        self._guard = threading.Lock()
        self._in_process: _InProcess | None = None
        self.closed = False

    def _pick(self) -> Any:
        """The live process with the fewest sessions; a new one while fewer than ``size`` run
        and all running ones are busy."""
        with self._guard:
            if self.closed:
                raise EngineError("the ALFWorld engine pool is closed")
            if self.size == 0:
                self._in_process = self._in_process or _InProcess()
                chosen: Any = self._in_process
            else:
                for p in [p for p in self._processes if p.dead]:
                    self._processes.remove(p)
                    p.close()
                idle = [p for p in self._processes if p.sessions == 0]
                if not idle and len(self._processes) < self.size:
                    self._processes.append(_Process())
                chosen = min(self._processes, key=lambda p: p.sessions)
            chosen.sessions += 1
            return chosen

    async def start(self, source: dict[str, Any]) -> tuple[Lease, Observation]:
        """Start a game (``{"spec": ..., "logic": ...}`` or ``{"game_file": path}``) on a free slot."""
        process = self._pick()
        try:
            slot, observation = await asyncio.to_thread(process.call, "start", -1, source)
        except BaseException:
            with self._guard:
                process.sessions -= 1
            raise
        return Lease(process, slot), observation

    async def step(self, lease: Lease, command: str) -> Observation:
        return await asyncio.to_thread(lease.process.call, "step", lease.slot, command)

    async def release(self, lease: Lease) -> None:
        """Give the slot back (the game is dropped when the next one loads into it)."""
        with self._guard:
            lease.process.sessions -= 1
        if not lease.process.dead:
            try:
                await asyncio.to_thread(lease.process.call, "release", lease.slot)
            except EngineError:
                pass

    async def stats(self) -> list[dict[str, Any]]:
        """Each engine process's pid, slots, cache sizes, RSS and open files (Linux)."""
        with self._guard:
            processes = [p for p in self._processes if not p.dead] or ([self._in_process] if self._in_process else [])
        return [await asyncio.to_thread(p.call, "stats") for p in processes]

    async def close(self) -> None:
        with self._guard:
            self.closed = True
            processes, self._processes = self._processes, []
        for p in processes:
            await asyncio.to_thread(p.close)
