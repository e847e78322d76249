"""The fault suite's harness: real controller and worker processes, a load of ``echo`` sessions,
and the accounting that proves no session was silently lost.

* :class:`FaultStack` starts ``python -m agentrl_envs.cli controller`` and ``... worker echo``
  processes on loopback ports (short heartbeat/dead-worker timings), can SIGKILL, SIGTERM,
  SIGSTOP/SIGCONT and restart any of them on the same port, and put a worker behind a
  :mod:`tcp_proxy` process in both directions (controller → worker and worker → controller).
  It stops exactly the processes it started, by PID, and SIGCONTs every one of them first.
* :class:`Load` drives ``sessions`` concurrent session loops from one asyncio loop in a thread of
  this process, through the real :class:`~agentrl_envs.client.AsyncControllerClient`: each loop
  starts an ``echo`` session, steps it (a wrong echo, so it goes on) ``steps`` times, ends it
  with the right echo (``completed``), and starts the next, until :meth:`Load.stop`; then each
  loop ends the session it holds. Every session the client ever got an id for is a
  :class:`SessionRecord` with exactly one outcome:

  ``completed`` / ``task error`` / ``cancelled`` (the status the controller answered, also when
  it came as ``409 session_finished`` naming it), ``session lost`` (``410 session_lost``),
  ``hung`` (one request took longer than ``request_timeout``), ``unresolved`` (the controller
  could not be reached for ``resolve_timeout`` seconds of retries), or ``error: <code>``
  (any other answer: a contract violation).

  A step whose connection broke (the controller died mid-request) is sent again until the
  controller answers, so a restart is seen as the clear error the new controller gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvloop

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import (
    AgentRLEnvsError,
    CapacityError,
    ControllerError,
    NoWorkerError,
    SessionBusyError,
    SessionFinishedError,
    WorkerUnreachableError,
)
from agentrl_envs.stack import ManagedProcess, free_port

try:  # the contract's new error (agentrl_envs.errors.SessionLostError, HTTP 410)
    from agentrl_envs.errors import SessionLostError
except ImportError:  # pragma: no cover - before the controller change lands
    SessionLostError = None  # type: ignore[assignment,misc]

HOST = "127.0.0.1"
PROXY = Path(__file__).with_name("tcp_proxy.py")
WORDS = ("apple", "river", "stone", "cloud", "ember", "maple", "quartz", "harbor")  # agentrl_envs.tasks.echo

#: Short timings: a worker beats every 0.5 s, is not live after 1.5 s of silence, and is probed
#: (then dropped if the probe fails) after 3 s without a heartbeat or an answer.
TIMINGS = {"heartbeat_interval": 0.5, "heartbeat_timeout": 1.5, "dead_after": 3.0}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentrl_envs.cli", *args]


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> float:
    """Poll ``predicate`` until true; return the seconds it took. A timeout guard, not a speed check."""
    t0 = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


@dataclass
class Worker:
    index: int
    port: int  # where it listens
    self_url: str  # its API prefix as the controller reaches it (the proxy's, when behind one)
    controller_url: str  # where it beats (the proxy's, when behind one)
    proc: ManagedProcess | None = None
    proxy: ManagedProcess | None = None
    proxy_ports: tuple[int, int] | None = None  # (controller → worker, worker → controller)

    @property
    def direct_url(self) -> str:
        return f"http://{HOST}:{self.port}"


class FaultStack:
    def __init__(
        self,
        log_dir: Path | None = None,
        *,
        heartbeat_interval: float = TIMINGS["heartbeat_interval"],
        heartbeat_timeout: float = TIMINGS["heartbeat_timeout"],
        dead_after: float = TIMINGS["dead_after"],
        interaction_timeout: float | None = None,  # None: the controller's default (240 s)
    ) -> None:
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="agentrl-faults-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.dead_after = dead_after
        self.interaction_timeout = interaction_timeout
        self.port = free_port(HOST)
        self.url = f"http://{HOST}:{self.port}"
        self.controller: ManagedProcess | None = None
        self.controller_runs = 0
        self.workers: list[Worker] = []
        self._retired: list[ManagedProcess] = []  # killed processes: their logs stay open until close()
        self.http = httpx.Client(timeout=5.0)

    # ------------------------------------------------------------------ processes

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}

    def start_controller(self) -> None:
        assert self.controller is None or not self.controller.alive(), "a controller is running"
        if self.controller is not None:
            self._retired.append(self.controller)
        self.controller_runs += 1
        args = ["controller", "--host", HOST, "--port", str(self.port), "--log-level", "warning"]
        args += ["--heartbeat-timeout", str(self.heartbeat_timeout), "--dead-after", str(self.dead_after)]
        if self.interaction_timeout is not None:
            args += ["--interaction-timeout", str(self.interaction_timeout)]
        self.controller = ManagedProcess(
            "controller", _cli(*args), self.log_dir / f"controller-{self.controller_runs}.log", self._env()
        )
        wait_until(lambda: self.http.get(f"{self.url}/health").status_code == 200, 60, "the controller answers /health")

    def add_worker(self, *, behind_proxy: bool = False) -> Worker:
        port = free_port(HOST)
        w = Worker(len(self.workers), port, f"http://{HOST}:{port}/api", self.url)
        if behind_proxy:
            to_worker, to_controller = free_port(HOST), free_port(HOST)
            w.proxy_ports = (to_worker, to_controller)
            w.self_url, w.controller_url = f"http://{HOST}:{to_worker}/api", f"http://{HOST}:{to_controller}"
            w.proxy = ManagedProcess(
                f"proxy-{w.index}",
                [sys.executable, str(PROXY), "--route", f"{to_worker}:{port}", "--route", f"{to_controller}:{self.port}"],
                self.log_dir / f"proxy-{w.index}.log",
                self._env(),
            )
            wait_until(lambda: "listening" in w.proxy.log_tail(), 30, "the proxy listens")
        self.workers.append(w)
        self.start_worker(w)
        return w

    def start_worker(self, w: Worker) -> None:
        assert w.proc is None or not w.proc.alive(), f"worker {w.index} is running"
        if w.proc is not None:
            self._retired.append(w.proc)
        args = ["worker", "echo", "--host", HOST, "--port", str(w.port), "--log-level", "warning"]
        args += ["--controller", w.controller_url, "--self", w.self_url, "--heartbeat-interval", str(self.heartbeat_interval)]
        runs = sum(1 for p in self._retired if p.name == f"worker-{w.index}") + 1
        w.proc = ManagedProcess(f"worker-{w.index}", _cli(*args), self.log_dir / f"worker-{w.index}-{runs}.log", self._env())
        self.wait_live(w)

    def send(self, proc: ManagedProcess | None, sig: signal.Signals) -> None:
        assert proc is not None
        if proc.alive():
            proc.proc.send_signal(sig)

    def kill(self, proc: ManagedProcess | None, sig: signal.Signals = signal.SIGKILL, timeout: float = 30) -> None:
        """Send ``sig`` and wait for the process to exit."""
        assert proc is not None
        self.send(proc, sig)
        proc.proc.wait(timeout)

    def partition(self, w: Worker) -> None:
        self._proxy_signal(w, signal.SIGUSR1, "partitioned")

    def heal(self, w: Worker) -> None:
        self._proxy_signal(w, signal.SIGUSR2, "healed")

    def _proxy_signal(self, w: Worker, sig: signal.Signals, word: str) -> None:
        assert w.proxy is not None, "this worker is not behind a proxy"
        before = w.proxy.log_path.read_text().count(word)
        self.send(w.proxy, sig)
        wait_until(lambda: w.proxy.log_path.read_text().count(word) > before, 10, f"the proxy {word}")

    def close(self) -> None:
        procs = [p for w in self.workers for p in (w.proc, w.proxy) if p is not None]
        procs += [self.controller] if self.controller else []
        for p in procs:  # a stopped process cannot handle SIGTERM: continue it first
            if p.alive():
                p.proc.send_signal(signal.SIGCONT)
        for w in self.workers:  # workers first, so they do not beat against a dead controller
            if w.proc is not None:
                w.proc.stop()
        if self.controller is not None:
            self.controller.stop()
        for w in self.workers:
            if w.proxy is not None:
                w.proxy.stop()
        for p in self._retired:
            p.stop()
        self.http.close()

    def logs(self, lines: int = 15) -> str:
        procs = [*self._retired, *(p for w in self.workers for p in (w.proc, w.proxy) if p), self.controller]
        return "\n".join(f"--- {p.log_path.name}\n{p.log_tail(lines)}" for p in procs if p is not None)

    # ------------------------------------------------------------------ views

    def list_workers(self) -> list[dict[str, Any]]:
        return self.http.get(f"{self.url}/api/list_workers").json().get("echo", [])

    def controller_worker(self, w: Worker) -> dict[str, Any] | None:
        """The controller's live entry for worker ``w`` (by the address it registered), or None."""
        for entry in self.list_workers():
            if entry["address"].rstrip("/") == w.self_url.rstrip("/") and entry["alive"]:
                return entry
        return None

    def registered(self, w: Worker) -> bool:
        """Whether the controller lists worker ``w`` at all (a worker declared dead is dropped)."""
        return any(e["address"].rstrip("/") == w.self_url.rstrip("/") for e in self.list_workers())

    def wait_live(self, w: Worker, timeout: float = 60) -> float:
        return wait_until(lambda: self.controller_worker(w) is not None, timeout, f"worker {w.index} live at the controller")

    def list_sessions(self) -> list[dict[str, Any]]:
        return self.http.get(f"{self.url}/api/list_sessions").json()

    def sessions_by_worker(self) -> dict[int, set[int]]:
        """Session ids per worker (our index), as the controller sees them now."""
        ids = {e["id"]: e["address"].rstrip("/") for e in self.list_workers()}
        by_address = {w.self_url.rstrip("/"): w.index for w in self.workers}
        out: dict[int, set[int]] = {w.index: set() for w in self.workers}
        for s in self.list_sessions():
            out.setdefault(by_address.get(ids.get(s["worker_id"], ""), -1), set()).add(s["session_id"])
        return out

    def busy_sessions(self) -> set[int]:
        """Sessions with a step in flight at the controller (it is waiting for their worker)."""
        return {s["session_id"] for s in self.list_sessions() if s["busy"]}

    def worker_current(self, w: Worker) -> int:
        """Sessions the worker process holds (asked directly, not through a proxy)."""
        return self.http.get(f"{w.direct_url}/api/worker_status").json()["current"]


# ---------------------------------------------------------------------------------- the load


def _call(text: str, n: int) -> dict[str, Any]:
    arguments = json.dumps({"text": text})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {"name": "echo", "arguments": arguments}}],
    }


@dataclass
class SessionRecord:
    sid: int
    index: int
    started: float  # time.monotonic()
    ended: float | None = None
    outcome: str | None = None
    detail: str = ""
    steps: int = 0
    resent: int = 0  # steps sent again after a broken connection
    inflight_since: float | None = None  # a step is waiting for its answer since then
    via: str = ""  # how the end came: "answer" (to a step), "409" (session_finished), "410", "error"


@dataclass
class LoadReport:
    sessions: list[SessionRecord]
    start_errors: Counter[str]
    steps: int
    seconds: float

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome or "open" for r in self.sessions)

    @property
    def unaccounted(self) -> list[SessionRecord]:
        """Sessions that have no outcome (the driver lost track of them): must be none."""
        return [r for r in self.sessions if r.outcome is None]

    def ended_between(self, t0: float, t1: float = float("inf")) -> list[SessionRecord]:
        return [r for r in self.sessions if r.ended is not None and t0 <= r.ended < t1]

    def summary(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "outcomes": dict(sorted(self.outcomes.items())),
            "unaccounted": len(self.unaccounted),
            "start_errors": dict(sorted(self.start_errors.items())),
            "steps": self.steps,
            "resent_steps": sum(r.resent for r in self.sessions),
            "seconds": round(self.seconds, 2),
        }


class Load:
    """``sessions`` concurrent session loops against ``url``, in a thread; see the module docstring."""

    def __init__(
        self,
        url: str,
        sessions: int,
        *,
        steps: tuple[int, int] = (20, 40),
        think: float = 0.0,
        request_timeout: float = 60.0,
        resolve_timeout: float = 60.0,
        seed: int = 0,
    ) -> None:
        self.url = url
        self.n = sessions
        self.steps = steps
        self.think = think
        self.request_timeout = request_timeout
        self.resolve_timeout = resolve_timeout
        self.rng = random.Random(seed)
        self.records: list[SessionRecord] = []
        self.start_errors: Counter[str] = Counter()
        self.total_steps = 0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._t0 = 0.0
        self._t1 = 0.0

    # ------------------------------------------------------------------ control (caller's thread)

    def start(self) -> Load:
        self._thread = threading.Thread(target=self._run_thread, name="fault-load", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self, timeout: float = 120.0) -> LoadReport:
        """Stop starting sessions, end every open one, and return the accounting."""
        assert self._loop is not None and self._stop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the load did not wind down within {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self.report()

    def report(self) -> LoadReport:
        end = self._t1 or time.monotonic()
        return LoadReport(list(self.records), Counter(self.start_errors), self.total_steps, end - self._t0)

    def running(self) -> list[SessionRecord]:
        return [r for r in list(self.records) if r.outcome is None]

    def wait_steps(self, n: int, timeout: float = 60) -> None:
        """Wait until ``n`` more steps were answered (the load is flowing)."""
        target = self.total_steps + n
        wait_until(lambda: self.total_steps >= target, timeout, f"{n} more steps answered")

    def wait_completed(self, after: float, n: int = 1, timeout: float = 60) -> None:
        """Wait until ``n`` sessions started after ``after`` completed."""
        wait_until(
            lambda: sum(1 for r in list(self.records) if r.started >= after and r.outcome == "completed") >= n,
            timeout,
            f"{n} sessions started after the fault completed",
        )

    # ------------------------------------------------------------------ the loops (load thread)

    def _run_thread(self) -> None:
        try:
            loop = uvloop.new_event_loop()  # the load generator's own cost is kept low: it shares the cores
            try:
                loop.run_until_complete(self._main())
            finally:
                loop.close()
        except BaseException as e:  # noqa: BLE001 - surfaced by stop()
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._t0 = time.monotonic()
        self._ready.set()
        async with AsyncControllerClient(self.url, timeout=self.request_timeout, max_connections=2 * self.n + 16) as client:
            await asyncio.gather(*(self._session_loop(client, i) for i in range(self.n)))
        self._t1 = time.monotonic()

    async def _start(self, client: AsyncControllerClient, index: int) -> tuple[int, Any] | None:
        """A new session, retrying while no worker can take it; None once the load stops."""
        assert self._stop is not None
        refused = 0
        while not self._stop.is_set():
            try:
                return await client.start_sample("echo", index)
            except (NoWorkerError, CapacityError, ControllerError, WorkerUnreachableError) as e:
                # No session id came back: no session for the client to lose. Counted, retried.
                self.start_errors[_kind(e)] += 1
                await asyncio.sleep(min(0.1 * 2**refused, 1.0) * (0.5 + self.rng.random()))
                refused += 1
        return None

    async def _session_loop(self, client: AsyncControllerClient, i: int) -> None:
        assert self._stop is not None
        n = 0
        while not self._stop.is_set():
            index = (i + n) % len(WORDS)
            n += 1
            started = await self._start(client, index)
            if started is None:
                return
            sid, first = started
            rec = SessionRecord(sid, index, time.monotonic())
            self.records.append(rec)
            if first.finish:
                self._end(rec, first.status.value, "finished at start", "answer")
                continue
            length = self.rng.randint(*self.steps)
            while rec.outcome is None:
                last = self._stop.is_set() or rec.steps >= length
                await self._step(client, rec, _call(WORDS[index] if last else "nope", rec.steps))
                if rec.outcome is None and last:
                    self._end(rec, "error: did not finish", "the right echo did not end the session", "answer")
                if self.think:
                    await asyncio.sleep(self.think * self.rng.random())

    async def _step(self, client: AsyncControllerClient, rec: SessionRecord, message: dict[str, Any]) -> None:
        deadline = time.monotonic() + self.resolve_timeout
        resends = 0
        while True:
            rec.inflight_since = time.monotonic()
            try:
                out = await client.interact(rec.sid, [message])
            except WorkerUnreachableError as e:
                rec.inflight_since = None
                if isinstance(e.__cause__, httpx.TimeoutException):
                    self._end(rec, "hung", f"no answer within {self.request_timeout:.0f} s: {e}", "error")
                    return
                if time.monotonic() > deadline:
                    self._end(rec, "unresolved", str(e), "error")
                    return
                rec.resent += 1  # the controller is down or the connection broke: ask again
                await asyncio.sleep(min(0.1 * 2**resends, 1.0) * (0.5 + self.rng.random()))
                resends += 1
                continue
            except SessionBusyError:  # a resent step whose first copy is still running
                rec.inflight_since = None
                await asyncio.sleep(0.05)
                continue
            except SessionFinishedError as e:
                self._end(rec, str(e.data.get("status") or "error: session_finished"), e.message, "409")
                return
            except AgentRLEnvsError as e:
                lost = SessionLostError is not None and isinstance(e, SessionLostError)
                self._end(rec, "session lost" if lost else f"error: {_kind(e)}", e.message, "410" if lost else "error")
                return
            rec.inflight_since = None
            rec.steps += 1
            self.total_steps += 1
            if out.finish:
                self._end(rec, out.status.value, str(out.metrics.get("error", "")), "answer")
            return

    @staticmethod
    def _end(rec: SessionRecord, outcome: str, detail: str, via: str = "") -> None:
        rec.outcome, rec.detail, rec.ended, rec.via, rec.inflight_since = outcome, detail, time.monotonic(), via, None


def _kind(e: BaseException) -> str:
    code = getattr(e, "code", type(e).__name__)
    status = getattr(e, "status_code", None)
    return f"{code} {status}" if status else str(code)
