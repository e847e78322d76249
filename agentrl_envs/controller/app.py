"""The controller's HTTP layer: AgentRL's client, worker and admin endpoints under ``/api``,
plus ``/health`` and Prometheus ``/metrics``; thin over :class:`ControllerService`.

Who may call what (:mod:`agentrl_envs.auth`, when tokens are configured): :data:`ROLES` gives the
client and worker routes; every other route (the admin ones, ``/metrics``, the OpenAPI pages,
any route added later) needs an admin token; ``/health`` is open. A session started with a
client token answers only that token (or an admin one): to any other it does not exist.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlsplit

import orjson
from fastapi import Header, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import InvalidRequestError, SessionError
from ..httpapi import FastRoutes, WithHeaders, json_response, parse_body, service_app
from ..protocol.agentrl import (
    HeartbeatRequest,
    InteractRequest,
    InteractResponse,
    MarkStaleRequest,
    StartSampleRequest,
    StartSampleResponse,
)
from ..transport.auth import ADMIN, ANONYMOUS, CLIENT, WORKER, Authenticator, Principal
from .service import VERSION, ControllerService

log = logging.getLogger(__name__)

# The role each route needs when tokens are configured; any other route needs ADMIN.
ROLES = {
    **{f"/api/{r}": CLIENT for r in ("get_indices", "start_sample", "interact", "cancel", "version")},
    **{f"/api/{r}": WORKER for r in ("receive_heartbeat", "cancel_notice")},
}
# A task name is a key, never a path: letters, digits and ._:@+- (AgentRL's are like `dbbench-std`).
_TASK_NAME = re.compile(r"[A-Za-z0-9_.:@+-]{1,128}")
# A worker address goes into the request line of every request to it: nothing that could split it.
_ADDRESS_PATH = re.compile(r"[A-Za-z0-9_.~/-]*")


def check_task_name(name: str) -> str:
    if not _TASK_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"task name {name[:80]!r} is not a task name (1-128 of letters, digits and ._:@+-)", field="name"
        )
    return name


def check_worker_address(address: str) -> str:
    """``http(s)://host:port[/prefix]`` and nothing else: no userinfo, query, fragment or odd characters."""
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or not _ADDRESS_PATH.fullmatch(parts.path)
        or not address.isprintable()
        or " " in address
        or (port is not None and not 0 < port < 65536)
    ):
        raise InvalidRequestError(f"worker address {address[:120]!r} is not http(s)://host:port[/prefix]", field="address")
    return address


def _session_id(value: str | None) -> int:
    if value is None:
        raise SessionError("missing `session_id` header")
    try:
        return int(value)
    except ValueError:
        raise SessionError(f"`session_id` header must be an integer, got {value!r}") from None


def _interact(
    service: ControllerService, session_id: str | None, raw: bytes, owner: Principal | None
) -> Awaitable[dict[str, Any]]:
    sid = _session_id(session_id)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise SessionError(f"request body is not valid JSON: {e}") from None
    messages = body.get("messages") if type(body) is dict else None
    if type(messages) is not list:
        raise InvalidRequestError('request body must be {"messages": [assistant message, ...]}')
    for m in messages:
        if type(m) is not dict:
            raise InvalidRequestError('request body must be {"messages": [assistant message, ...]}')
    return service.begin_interact(sid, messages, owner=owner)


def create_controller_app(service: ControllerService | None = None, *, auth: Authenticator | None = None) -> FastRoutes:
    """The controller's app; ``auth``: its tokens (none: every route open, the loopback default)."""
    service = service or ControllerService()
    auth = auth or Authenticator()

    app = service_app("agentrl-envs controller", service)
    latency = service.metrics.latency

    def owner(headers: dict[bytes, bytes]) -> Principal | None:
        """Whose request it is, for quotas and session ownership (None: nobody's to track)."""
        p = auth.principal(headers.get(b"authorization"))
        return None if p is ANONYMOUS else p

    def request_owner(request: Request) -> Principal | None:
        return request.scope.get("principal") if auth.enabled else None  # set by FastRoutes

    @app.get("/api/get_indices")
    async def get_indices(name: str) -> Response:
        return json_response(service.get_indices(check_task_name(name)))

    async def fast_start_sample(headers: dict[bytes, bytes], body: bytes) -> WithHeaders:
        t0 = time.perf_counter()
        req = parse_body(StartSampleRequest, body)
        sid, out = await service.start_sample(check_task_name(req.name), req.index, req.custom_task, owner=owner(headers))
        latency.labels("start_sample", req.name).observe(time.perf_counter() - t0)
        return WithHeaders(out, {"session_id": str(sid)})

    @app.post("/api/start_sample", response_model=StartSampleResponse)
    async def start_sample(request: Request) -> Response:
        # Served by the FastRoutes front below; this route documents it in the OpenAPI schema.
        r = await fast_start_sample(dict(request.scope["headers"]), await request.body())
        return json_response(r.body, headers=r.headers)

    @app.post("/api/interact", response_model=InteractResponse)
    async def interact(
        request: Request, body: InteractRequest, session_id: str | None = Header(default=None, convert_underscores=False)
    ) -> Response:
        # Served by the FastRoutes front below; this route documents it in the OpenAPI schema.
        raw = orjson.dumps({"messages": [m.model_dump(mode="json", exclude_unset=True) for m in body.messages]})
        return json_response(await _interact(service, session_id, raw, request_owner(request)))

    @app.post("/api/cancel")
    async def cancel(request: Request, session_id: str | None = Header(default=None, convert_underscores=False)) -> Response:
        sid = _session_id(session_id)
        await service.cancel(sid, owner=request_owner(request))
        return json_response({"session_id": sid})

    @app.post("/api/receive_heartbeat")
    async def receive_heartbeat(request: Request) -> Response:
        req = parse_body(HeartbeatRequest, await request.body())
        check_task_name(req.name)
        check_worker_address(req.address)
        w = service.heartbeat(req)
        return json_response({"worker_id": w.id})

    @app.get("/api/list_workers")
    async def list_workers() -> Response:
        return json_response(service.list_workers())

    @app.get("/api/list_sessions")
    async def list_sessions() -> Response:
        return json_response(service.list_sessions())

    @app.post("/api/mark_stale")
    async def mark_stale(request: Request) -> Response:
        req = parse_body(MarkStaleRequest, await request.body())
        w = service.mark_stale(req.name, req.worker_id, req.stale)
        return json_response({"worker_id": w.id, "stale": w.stale})

    @app.post("/api/cancel_all")
    async def cancel_all(name: str | None = None, force: bool = False) -> Response:
        # As AgentRL's: without `name` while several tasks are registered, 403 unless force=true.
        return json_response({"cancelled": await service.cancel_all(name or None, force)})

    @app.post("/api/cancel_notice")
    async def cancel_notice(
        request: Request, session_id: str | None = Header(default=None, convert_underscores=False)
    ) -> Response:
        # A worker finished a cancel with notice (AgentRL's); the session is named by the header
        # (AgentRL's controller reads only that), or else by the body's `session_id`. It ends only
        # if its own worker confirms it dropped it (service.cancel_notice): the secret is shared.
        if session_id is None:
            with contextlib.suppress(orjson.JSONDecodeError):
                body = orjson.loads(await request.body() or b"null")
                if isinstance(body, dict) and isinstance(body.get("session_id"), (int, str)):
                    session_id = str(body["session_id"])
        sid = _session_id(session_id)
        ended, why = await service.cancel_notice(sid)
        return json_response({"session_id": sid, "ended": True} if ended else {"session_id": sid, "ended": False, "detail": why})

    @app.post("/api/clean_worker")
    async def clean_worker() -> Response:
        return json_response(await service.clean_workers())

    @app.post("/api/clean_session")
    async def clean_session() -> Response:
        return json_response({"cancelled": await service.expire_idle_sessions()})

    @app.post("/api/sync_all")
    async def sync_all() -> Response:
        return json_response(await service.sync_all())

    @app.get("/api/version")
    async def version() -> Response:
        return json_response({"version": VERSION})

    @app.get("/health")
    async def health() -> Response:
        workers = service.list_workers()
        live = {name: sum(1 for w in ws if w["alive"]) for name, ws in workers.items()}
        return json_response({"status": "ok", "live_workers": live, "sessions": len(service.sessions)})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def fast_interact(headers: dict[bytes, bytes], body: bytes) -> Awaitable[dict[str, Any]]:
        sid = headers.get(b"session_id")
        return _interact(
            service, sid.decode("latin-1") if sid is not None else None, body, owner(headers) if auth.enabled else None
        )

    return FastRoutes(
        app,
        {("POST", "/api/interact"): fast_interact, ("POST", "/api/start_sample"): fast_start_sample},
        auth=auth,
        roles=ROLES,
        default_role=ADMIN,
    )
