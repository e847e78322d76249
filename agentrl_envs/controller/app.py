"""The controller's HTTP layer: AgentRL's client, worker and admin endpoints under ``/api``,
plus ``/health`` and Prometheus ``/metrics``; thin over :class:`ControllerService`.

Who may call what (:mod:`agentrl_envs.auth`, when tokens are configured): :data:`ROLES` gives the
client and worker routes; every other route (the admin ones, ``/metrics``, the OpenAPI pages,
any route added later) needs an admin token; ``/health`` is open. A session started with a
client token answers only that token (or an admin one): to any other it does not exist.

The hot routes (``start_sample``, ``interact``) are :class:`_HotRoutes`' handlers, served by the
transport (:mod:`agentrl_envs.transport`); every other route is FastAPI's (``routes``).
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
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import InvalidRequestError, SessionError
from ..protocol.agentrl import (
    HeartbeatRequest,
    InteractRequest,
    InteractResponse,
    MarkStaleRequest,
    StartSampleRequest,
    StartSampleResponse,
)
from ..transport.answers import WithHeaders, json_response, parse_body
from ..transport.auth import ADMIN, ANONYMOUS, CLIENT, WORKER, Authenticator, Principal
from ..transport.routes import PRINCIPAL, FastRoutes, service_app
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


def _owner(principal: Principal | None) -> Principal | None:
    """Whose request it is, for quotas and session ownership (None: nobody's to track)."""
    return None if principal is ANONYMOUS else principal


class _HotRoutes:
    """The controller's hot routes: the request's headers and raw body in (the principal among
    the headers, :data:`~agentrl_envs.transport.routes.PRINCIPAL`), the client's reply out."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self.latency = service.metrics.latency

    async def start_sample(self, headers: dict[bytes, Any], body: bytes) -> WithHeaders:
        t0 = time.perf_counter()
        req = parse_body(StartSampleRequest, body)
        owner = _owner(headers.get(PRINCIPAL))
        sid, out = await self.service.start_sample(check_task_name(req.name), req.index, req.custom_task, owner=owner)
        self.latency.labels("start_sample", req.name).observe(time.perf_counter() - t0)
        return WithHeaders(out, {"session_id": str(sid)})

    def interact(self, headers: dict[bytes, Any], raw: bytes) -> Awaitable[dict[str, Any]]:
        """A step (or a renewal): checked here, answered through the awaitable the service gives."""
        header = headers.get(b"session_id")
        sid = _session_id(header.decode("latin-1") if header is not None else None)
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
        principal = headers.get(PRINCIPAL)
        return self.service.begin_interact(sid, messages, owner=None if principal is ANONYMOUS else principal)


def create_controller_app(service: ControllerService | None = None, *, auth: Authenticator | None = None) -> FastRoutes:
    """The controller's app; ``auth``: its tokens (none: every route open, the loopback default)."""
    service = service or ControllerService()
    app = service_app("agentrl-envs controller", service)
    for method, path, endpoint in ROUTES:
        app.add_api_route(path, endpoint, methods=[method])
    hot = _HotRoutes(service)
    return FastRoutes(
        app,
        {("POST", "/api/interact"): hot.interact, ("POST", "/api/start_sample"): hot.start_sample},
        auth=auth or Authenticator(),
        roles=ROLES,
        default_role=ADMIN,
        docs=hot_route_docs,
    )


# --------------------------------------------------------------------------- FastAPI's routes


def _service(request: Request) -> ControllerService:
    return request.app.state.service


def _request_owner(request: Request) -> Principal | None:
    return _owner(request.scope.get("principal"))  # set by the transport's one check


async def get_indices(request: Request, name: str) -> Response:
    return json_response(_service(request).get_indices(check_task_name(name)))


async def cancel(request: Request, session_id: str | None = Header(default=None, convert_underscores=False)) -> Response:
    sid = _session_id(session_id)
    await _service(request).cancel(sid, owner=_request_owner(request))
    return json_response({"session_id": sid})


async def receive_heartbeat(request: Request) -> Response:
    req = parse_body(HeartbeatRequest, await request.body())
    check_task_name(req.name)
    check_worker_address(req.address)
    w = _service(request).heartbeat(req)
    return json_response({"worker_id": w.id})


async def list_workers(request: Request) -> Response:
    return json_response(_service(request).list_workers())


async def list_sessions(request: Request) -> Response:
    return json_response(_service(request).list_sessions())


async def mark_stale(request: Request) -> Response:
    req = parse_body(MarkStaleRequest, await request.body())
    w = _service(request).mark_stale(req.name, req.worker_id, req.stale)
    return json_response({"worker_id": w.id, "stale": w.stale})


async def cancel_all(request: Request, name: str | None = None, force: bool = False) -> Response:
    # As AgentRL's: without `name` while several tasks are registered, 403 unless force=true.
    return json_response({"cancelled": await _service(request).cancel_all(name or None, force)})


async def cancel_notice(request: Request, session_id: str | None = Header(default=None, convert_underscores=False)) -> Response:
    # A worker finished a cancel with notice (AgentRL's); the session is named by the header
    # (AgentRL's controller reads only that), or else by the body's `session_id`. It ends only
    # if its own worker confirms it dropped it (service.cancel_notice): the secret is shared.
    if session_id is None:
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(await request.body() or b"null")
            if isinstance(body, dict) and isinstance(body.get("session_id"), (int, str)):
                session_id = str(body["session_id"])
    sid = _session_id(session_id)
    ended, why = await _service(request).cancel_notice(sid)
    return json_response({"session_id": sid, "ended": True} if ended else {"session_id": sid, "ended": False, "detail": why})


async def clean_worker(request: Request) -> Response:
    return json_response(await _service(request).clean_workers())


async def clean_session(request: Request) -> Response:
    return json_response({"cancelled": await _service(request).expire_idle_sessions()})


async def sync_all(request: Request) -> Response:
    return json_response(await _service(request).sync_all())


async def version() -> Response:
    return json_response({"version": VERSION})


async def health(request: Request) -> Response:
    service = _service(request)
    workers = service.list_workers()
    live = {name: sum(1 for w in ws if w["alive"]) for name, ws in workers.items()}
    return json_response({"status": "ok", "live_workers": live, "sessions": len(service.sessions)})


async def metrics(request: Request) -> Response:
    return Response(generate_latest(_service(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


# What FastAPI serves: (method, path, endpoint).
ROUTES = [
    ("GET", "/api/get_indices", get_indices),
    ("POST", "/api/cancel", cancel),
    ("POST", "/api/receive_heartbeat", receive_heartbeat),
    ("GET", "/api/list_workers", list_workers),
    ("GET", "/api/list_sessions", list_sessions),
    ("POST", "/api/mark_stale", mark_stale),
    ("POST", "/api/cancel_all", cancel_all),
    ("POST", "/api/cancel_notice", cancel_notice),
    ("POST", "/api/clean_worker", clean_worker),
    ("POST", "/api/clean_session", clean_session),
    ("POST", "/api/sync_all", sync_all),
    ("GET", "/api/version", version),
    ("GET", "/health", health),
    ("GET", "/metrics", metrics),
]

# The hot routes as OpenAPI documents them (served by the transport, never by FastAPI).
hot_route_docs = APIRouter()


@hot_route_docs.post("/api/start_sample", response_model=StartSampleResponse)
def start_sample(body: StartSampleRequest) -> None:
    """Start a session of task ``name`` on sample ``index``; its id comes in the ``session_id`` header."""


@hot_route_docs.post("/api/interact", response_model=InteractResponse)
def interact(body: InteractRequest, session_id: str | None = Header(default=None, convert_underscores=False)) -> None:
    """One step of session ``session_id`` (or a renewal): the task's answer to the assistant's messages."""
