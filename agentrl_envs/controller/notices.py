"""Cancel notices checked against the worker that owns the session (docs/security.md).

A worker ends a *cancel with notice* (AgentRL's) by ``POST /api/cancel_notice``: it dropped the
session and the controller should end it too. The request carries the worker secret, which every
worker shares, so it cannot prove *which* worker sent it: taken on trust, any holder of the secret
could end any other worker's sessions. So the controller asks the owning worker itself
(``GET get_sessions``, on a connection of its own) and ends the session only if that worker no
longer holds it. Both AgentRL's worker and ours drop a session *before* they send its notice, so a
genuine notice always passes; one sent while the owner still holds the session is refused.

Contract: ``await checker.held(worker, sid) -> bool``: whether ``worker`` lists ``sid`` in an answer
to a listing *asked after this call began* (an earlier listing could predate the drop and refuse a
genuine notice). Notices for one worker that arrive while a listing is in flight share the next
one: a worker cancelling 1,000 sessions with notice is asked a few times, not 1,000. Raises what
the listing raises (the worker could not be asked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: lists the session ids a worker holds (the controller's ``GET {address}/get_sessions``)
Lister = Callable[[Any], Awaitable[set[int]]]


class NoticeChecker:
    def __init__(self, list_sessions: Lister) -> None:
        self._list = list_sessions
        # worker id -> notices waiting for the next listing: (session id, its answer)
        self._waiting: dict[str, list[tuple[int, asyncio.Future[bool]]]] = {}
        self._listing: dict[str, asyncio.Task[None]] = {}  # worker id -> its batches' task

    async def held(self, worker: Any, sid: int) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(worker.id, []).append((sid, answer))
        if worker.id not in self._listing:
            task = asyncio.get_running_loop().create_task(self._batches(worker))
            self._listing[worker.id] = task
        return await answer

    async def _batches(self, worker: Any) -> None:
        """One listing per batch; a batch is every notice that arrived before its listing was asked."""
        batch: list[tuple[int, asyncio.Future[bool]]] = []
        try:
            while batch := self._waiting.pop(worker.id, []):
                try:
                    held = await self._list(worker)
                except Exception as e:  # noqa: BLE001 - handed to each waiting notice
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(e)
                    continue
                for sid, answer in batch:
                    if not answer.done():
                        answer.set_result(sid in held)
        finally:
            self._listing.pop(worker.id, None)
            for _, answer in batch + self._waiting.pop(worker.id, []):  # left unanswered: cancelled (shutdown)
                answer.cancel()

    def close(self) -> None:
        for task in list(self._listing.values()):
            task.cancel()
