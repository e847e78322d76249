"""Keeping the controller's view of its workers and sessions true, in the background and on demand.

* **silent workers**: one silent (no heartbeat, answer or probe answer) for more than
  ``dead_after`` is probed with ``GET /health`` on a connection of its own (not queued behind
  session traffic), and declared dead only if that gets no HTTP answer within ``probe_timeout``;
* **idle sessions**: those with no step in flight for more than ``idle_timeout`` are cancelled;
* **reconciliation** (on a worker's registration, and ``sync_all``): the sessions a worker holds
  that the controller does not know are cancelled on it; those the controller routes to it that
  it no longer holds end ``task error``.

:meth:`Sweeper.run` does the first two every ``heartbeat_timeout / 4`` (0.05 to 1 s);
``clean_worker`` / ``clean_session`` (AgentRL's admin endpoints) do each now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..protocol.agentrl import SampleStatus
from .registry import Worker, WorkerRegistry
from .sessions import SessionRouter

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(
        self,
        registry: WorkerRegistry,
        router: SessionRouter,
        worker_died: Callable[[Worker, str], None],
        *,
        heartbeat_timeout: float,
        dead_after: float,
        idle_timeout: float,
        worker_headers: dict[str, str],
        worker_ssl: ssl.SSLContext | None,
    ) -> None:
        self.registry = registry
        self.router = router
        self.worker_died = worker_died
        self.heartbeat_timeout = heartbeat_timeout
        self.dead_after = dead_after
        self.idle_timeout = idle_timeout
        self.probe_timeout = min(5.0, max(0.5, heartbeat_timeout / 2))
        self._worker_headers = worker_headers
        self._worker_ssl = worker_ssl
        self._tasks: set[asyncio.Task[Any]] = set()  # probes and reconciliations in flight

    def probe_client(self) -> httpx.AsyncClient:
        """A client of its own for probes and reconciliations, with the worker secret."""
        return httpx.AsyncClient(timeout=self.probe_timeout, headers=self._worker_headers, verify=self._worker_ssl or True)

    def background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ silent workers

    async def probe(self, w: Worker, silent: float) -> None:
        """A silent worker is dead only if it does not answer ``GET /health`` on a connection of
        its own (not queued behind session traffic) within ``probe_timeout``."""
        try:
            async with self.probe_client() as client:
                await client.get(f"{w.address}/health")
        except httpx.HTTPError as e:
            self.worker_died(w, f"no heartbeat or answer for {silent:.0f} s, and /health did not answer ({type(e).__name__})")
        else:
            w.last_probe = time.monotonic()
            log.warning(
                "worker %s (%r at %s): no heartbeat for %.0f s but it answers: kept, no new sessions until it beats",
                w.id,
                w.name,
                w.address,
                silent,
            )
        finally:
            w.probing = False

    def silent_workers(self, now: float) -> list[tuple[Worker, float]]:
        """Workers silent past ``dead_after`` and not being probed, marked as being probed now."""
        out = []
        for w in list(self.registry.workers.values()):
            silent = now - max(w.last_sign(), w.last_probe)
            if silent > self.dead_after and not w.probing and not w.dead:
                w.probing = True
                out.append((w, silent))
        return out

    async def clean_workers(self) -> dict[str, Any]:
        """The sweep's worker half, now: probe each worker silent for more than ``dead_after``
        (no heartbeat, answer or probe answer); drop those that do not answer."""
        targets = self.silent_workers(time.monotonic())
        await asyncio.gather(*(self.probe(w, silent) for w, silent in targets))
        return {
            "probed": len(targets),
            "dropped": [{"worker": w.address, "task": w.name} for w, _ in targets if w.dead],
            "kept": [{"worker": w.address, "task": w.name} for w, _ in targets if not w.dead],
        }

    # ------------------------------------------------------------------ idle sessions

    async def expire_idle_sessions(self) -> list[int]:
        """The sweep's session half, now: cancel the sessions idle (no step in flight) for more
        than ``idle_timeout``; their ids."""
        now = time.monotonic()
        idle = [
            (sid, now - s.last_active)
            for sid, s in self.router.sessions.items()
            if not s.busy and now - s.last_active > self.idle_timeout
        ]
        for sid, for_s in idle:
            log.info("session %d idle for %.0f s: cancelled", sid, for_s)
        results = await asyncio.gather(
            *(self.router.cancel(sid, f"idle for {for_s:.0f} s (idle timeout {self.idle_timeout:.0f} s)") for sid, for_s in idle),
            return_exceptions=True,
        )
        return [sid for (sid, _), r in zip(idle, results, strict=True) if not isinstance(r, BaseException)]

    async def run(self) -> None:
        """Both halves, every ``heartbeat_timeout / 4`` (0.05 to 1 s), until cancelled."""
        period = max(0.05, min(1.0, self.heartbeat_timeout / 4))
        while True:
            await asyncio.sleep(period)
            for w, silent in self.silent_workers(time.monotonic()):
                self.background(self.probe(w, silent))
            with contextlib.suppress(Exception):
                await self.expire_idle_sessions()

    # ------------------------------------------------------------------ reconciliation

    async def held_sessions(self, w: Worker, client: httpx.AsyncClient | None = None) -> set[int]:
        """The session ids worker ``w`` holds, by its ``GET get_sessions`` (on ``client``, else a
        probe client of its own). Raises httpx.HTTPError, ValueError or TypeError on a bad answer."""
        if client is None:
            async with self.probe_client() as own:
                return await self.held_sessions(w, own)
        r = await client.get(f"{w.address}/get_sessions")
        r.raise_for_status()
        return {int(sid) for sid in r.json()}

    async def reconcile(self, w: Worker) -> dict[str, Any]:
        """Bring a worker and this controller to agree on its sessions (on registration, and on
        ``sync_all``): cancel the sessions it holds that this controller does not know, and end
        ``task error`` the sessions this controller routes to it that it no longer holds (not
        those with a step in flight or active since the listing was asked for: a step may have
        just finished them)."""
        sessions = self.router.sessions
        asked = time.monotonic()
        orphans: list[int] = []
        ended: list[int] = []
        try:
            async with self.probe_client() as client:
                held = await self.held_sessions(w, client)
                orphans = [sid for sid in held if sid not in sessions and sid not in w.sessions]
                for sid in list(w.sessions):
                    s = sessions.get(sid)
                    if s is None or s.worker is not w or sid in held or s.busy or max(s.created, s.last_active) >= asked:
                        continue
                    ended.append(sid)
                    self.router.end(
                        sid, SampleStatus.TASK_ERROR, f"worker {w.address} no longer holds this session (found by a sync)"
                    )
                for sid in orphans:
                    await client.post(f"{w.address}/cancel", json={"session_id": sid})
        except (httpx.HTTPError, ValueError, TypeError, AttributeError) as e:
            log.warning("worker %s at %s: could not list or cancel its sessions: %r", w.id, w.address, e)
            return {
                "worker": w.address,
                "task": w.name,
                "error": f"{type(e).__name__}: {e}",
                "cancelled": orphans,
                "ended": ended,
            }
        if orphans:
            log.info("worker %s at %s held %d sessions this controller does not know: cancelled", w.id, w.address, len(orphans))
        if ended:
            log.warning("worker %s at %s no longer holds %d of its sessions: ended task error", w.id, w.address, len(ended))
        return {"worker": w.address, "task": w.name, "cancelled": orphans, "ended": ended}

    async def sync_all(self) -> dict[str, Any]:
        """Reconcile every registered worker now (as on registration): cancel the sessions each
        holds that this controller does not know; end ``task error`` those it no longer holds."""
        results = await asyncio.gather(*(self.reconcile(w) for w in list(self.registry.workers.values()) if not w.dead))
        return {
            "workers": len(results),
            "failed": [{"worker": r["worker"], "task": r["task"], "error": r["error"]} for r in results if "error" in r],
            "cancelled_on_workers": sum(len(r["cancelled"]) for r in results),
            "ended": sorted(sid for r in results for sid in r["ended"]),
        }
