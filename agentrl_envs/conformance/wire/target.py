"""What the wire-level checks see: raw HTTP answers from a controller and from its workers.

:class:`WireTarget` talks only HTTP: to the controller's client API (``start_sample``,
``interact``, ``cancel``, ``get_indices``, ``list_workers``, ``list_sessions``) and, where a
rule is the worker's own (its capacity answer, its session list), to the worker at the address
the controller lists. Every call returns an :class:`Answer` (status, decoded body, headers),
never raises on an HTTP error status: the checks compare what came with what was expected and
:meth:`Answer.what` says what came in one line.

Tokens (docs/security.md): ``AGENTRL_CLIENT_TOKEN`` goes to the controller, ``AGENTRL_WORKER_SECRET``
to the workers, as ``Authorization: Bearer``.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from ...transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, bearer, env_token, split_userinfo
from ..common import shorten

#: Session ids the checks use on a worker directly (its capacity): below every id a controller of
#: agentrl-envs hands out (start time in ms × 1000, ≥ 1.6e15), so they never collide with one.
_PRIVATE_ID_BASE = 900_000_000_000_000


@dataclass
class Answer:
    """One HTTP answer: ``body`` is the decoded JSON, else the text (``None`` when nothing came)."""

    method: str
    url: str
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def what(self) -> str:
        """``POST /api/interact -> HTTP 500: {...}`` in one line (long bodies shortened)."""
        return f"{self.method} {httpx.URL(self.url).path} -> HTTP {self.status}: {shorten(self.body, 300)}"


@dataclass
class Worker:
    """A live worker of the task, as ``GET /api/list_workers`` lists it."""

    id: str
    address: str
    concurrency: int

    @property
    def root(self) -> str:
        """The address without its ``/api`` prefix: where ``/health`` is."""
        return self.address[: -len("/api")] if self.address.endswith("/api") else self.address


class WireTarget:
    """The task ``task`` behind the controller at ``controller`` (``http://host:port``, with or
    without ``/api``). ``container_health``: for an image under test, a function giving the
    container's Docker health status (``None`` when the image declares no HEALTHCHECK)."""

    def __init__(
        self,
        controller: str,
        task: str,
        *,
        timeout: float = 60.0,
        container_health: Callable[[], str | None] | None = None,
    ) -> None:
        url, url_token = split_userinfo(controller.rstrip("/"))
        self.controller = url[: -len("/api")] if url.endswith("/api") else url
        self.task = task
        self.container_health = container_health
        client_headers = bearer(env_token(CLIENT_TOKEN_ENV) or url_token)
        self._client = httpx.Client(timeout=timeout, headers=client_headers)
        self._worker = httpx.Client(timeout=timeout, headers=bearer(env_token(WORKER_SECRET_ENV)))
        self._ids = itertools.count(_PRIVATE_ID_BASE + secrets.randbelow(10**9) * 1000)
        #: What a check learned about the task that later checks of the run reuse (e.g.
        #: :func:`~agentrl_envs.conformance.wire.moves.keep_open`'s move).
        self.learned: dict[str, Any] = {}

    def __enter__(self) -> WireTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        self._worker.close()

    @property
    def who(self) -> str:
        return f"task {self.task!r} at {self.controller}"

    # ------------------------------------------------------------------ raw requests

    def _send(self, http: httpx.Client, method: str, url: str, **kwargs: Any) -> Answer:
        r = http.request(method, url, **kwargs)
        try:
            body: Any = r.json()
        except ValueError:
            body = r.text or None
        return Answer(method, url, r.status_code, body, dict(r.headers))

    def api(self, method: str, path: str, *, session_id: int | None = None, **kwargs: Any) -> Answer:
        """A request to the controller's ``/api/{path}``; ``session_id`` goes in its header."""
        headers = {"session_id": str(session_id)} if session_id is not None else None
        return self._send(self._client, method, f"{self.controller}/api/{path}", headers=headers, **kwargs)

    def on_worker(self, worker: Worker, method: str, path: str, **kwargs: Any) -> Answer:
        """A request to a worker: ``path`` under its address (``/api``), or from its root if it starts with ``/``."""
        base = worker.root if path.startswith("/") else worker.address + "/"
        return self._send(self._worker, method, base + path, **kwargs)

    # ------------------------------------------------------------------ the client API

    def start(self, index: Any) -> Answer:
        return self.api("POST", "start_sample", json={"name": self.task, "index": index})

    def interact(self, session_id: int, message: dict[str, Any]) -> Answer:
        return self.api("POST", "interact", session_id=session_id, json={"messages": [message]})

    def cancel(self, session_id: int) -> Answer:
        return self.api("POST", "cancel", session_id=session_id)

    def first_index(self) -> Any:
        """The sample the checks play: the task's first."""
        return self.indices()[0]

    def indices(self) -> list[Any]:
        a = self.api("GET", "get_indices", params={"name": self.task})
        assert a.ok and isinstance(a.body, list) and a.body, (
            f"{self.who}: expected a non-empty list of sample indices, got {a.what()}"
        )
        return a.body

    def live_workers(self) -> list[Worker]:
        """The task's live, non-stale workers (those that get new sessions)."""
        a = self.api("GET", "list_workers")
        assert a.ok and isinstance(a.body, dict), f"{self.who}: expected the controller's worker list, got {a.what()}"
        return [
            Worker(str(w.get("id")), str(w["address"]).rstrip("/"), int(w.get("concurrency", 0)))
            for w in a.body.get(self.task, [])
            if isinstance(w, dict) and w.get("alive") and not w.get("stale") and w.get("address")
        ]

    def worker_of(self, session_id: int) -> Worker:
        """The worker the controller routed session ``session_id`` to."""
        workers = self.live_workers()
        a = self.api("GET", "list_sessions")
        listed = [s for s in a.body if isinstance(s, dict) and s.get("session_id") == session_id] if a.ok else []
        if listed:
            for w in workers:
                if w.id == str(listed[0].get("worker_id")):
                    return w
        held = [w for w in workers if str(session_id) in self.held(w)]
        assert held, (
            f"{self.who}: expected a live worker to hold session {session_id}, got none of {[w.address for w in workers]}"
        )
        return held[0]

    def open_sessions(self) -> set[int]:
        """The ids of the task's sessions the controller holds (``GET /api/list_sessions``)."""
        a = self.api("GET", "list_sessions")
        assert a.ok and isinstance(a.body, list), f"{self.who}: expected the controller's session list, got {a.what()}"
        return {s.get("session_id") for s in a.body if isinstance(s, dict) and s.get("name") == self.task}

    # ------------------------------------------------------------------ a worker's own view

    def held(self, worker: Worker) -> dict[str, Any]:
        """``GET {worker}/get_sessions``: session id (as a string) → sample index."""
        a = self.on_worker(worker, "GET", "get_sessions")
        assert a.ok and isinstance(a.body, dict), (
            f"{self.who}: expected GET get_sessions on worker {worker.address} to answer a JSON object, got {a.what()}"
        )
        return {str(k): v for k, v in a.body.items()}

    def worker_status(self, worker: Worker) -> tuple[int, int]:
        """``GET {worker}/worker_status``: (concurrency, current)."""
        a = self.on_worker(worker, "GET", "worker_status")
        body = a.body if isinstance(a.body, dict) else {}
        concurrency, current = body.get("concurrency"), body.get("current")
        assert a.ok and type(concurrency) is int and type(current) is int and concurrency >= 1 and 0 <= current, (
            f"{self.who}: expected GET worker_status on worker {worker.address} to answer"
            f" {{'concurrency': int >= 1, 'current': int >= 0}}, got {a.what()}"
        )
        return concurrency, current

    def private_id(self) -> int:
        """A session id for a session started on a worker directly (see ``_PRIVATE_ID_BASE``)."""
        return next(self._ids)

    def start_on(self, worker: Worker, index: Any, session_id: int) -> Answer:
        return self.on_worker(
            worker, "POST", "start_sample", json={"index": index, "custom_task": None, "session_id": session_id}
        )

    # ------------------------------------------------------------------ sessions the checks open

    @contextlib.contextmanager
    def session(self, index: Any) -> Iterator[tuple[int, dict[str, Any]]]:
        """A session of sample ``index`` started through the controller: ``(session id, first
        answer)``; cancelled on exit unless it ended (a cancel that fails then is ignored)."""
        a = self.start(index)
        assert a.ok and isinstance(a.body, dict), f"{self.who}: expected sample {index!r} to start, got {a.what()}"
        sid = a.headers.get("session_id")
        assert sid is not None and sid.isdigit(), (
            f"{self.who}: expected the start's `session_id` response header to be an integer, got {sid!r}"
        )
        assert not a.body.get("finish"), (
            f"{self.who}: expected sample {index!r} to start, got the episode ended at once"
            f" (status {a.body.get('status')!r}, metrics {shorten(a.body.get('metrics'), 200)})"
        )
        try:
            yield int(sid), a.body
        finally:
            with contextlib.suppress(httpx.HTTPError):
                self.cancel(int(sid))

    def wait(self, predicate: Callable[[], bool], seconds: float, interval: float = 0.2) -> bool:
        """Poll ``predicate`` until it holds (True) or ``seconds`` pass (False)."""
        deadline = time.monotonic() + seconds
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(interval)
        return True
