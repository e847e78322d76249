"""The worker's HTTP layer: AgentRL's worker endpoints under ``/api``, thin over :class:`WorkerService`.

With a worker secret (``auth``) every route but ``/health`` (the multiplexed upgrade included)
answers only a request that carries it: the controller's (docs/security.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..protocol.agentrl import (
    EnvOutput,
    WorkerCancelRequest,
    WorkerInteractRequest,
    WorkerInteractResponse,
    WorkerStartSampleRequest,
    WorkerStatus,
    is_renewal,
)
from ..transport.answers import WithHeaders, json_response, parse_body
from ..transport.auth import WORKER, Authenticator
from ..transport.routes import FastRoutes, service_app
from .service import WorkerService


def create_worker_app(service: WorkerService, *, auth: Authenticator | None = None) -> FastRoutes:
    """The worker's app; ``auth``: :func:`~agentrl_envs.transport.auth.worker_authenticator` of its secret."""
    app = service_app(f"agentrl-envs worker: {service.name}", service)

    async def fast_start_sample(_: dict[bytes, bytes], body: bytes) -> WithHeaders:
        req = parse_body(WorkerStartSampleRequest, body)
        out = await service.start_sample(req.session_id, req.index, req.custom_task)
        return WithHeaders(out.wire(tools=True), {"session_id": str(req.session_id)})

    async def fast_interact(_: dict[bytes, bytes], body: bytes) -> dict[str, Any]:
        req = parse_body(WorkerInteractRequest, body)
        messages = req.messages or []
        out = await service.interact(req.session_id, messages)
        env_out = out.wire(tools=out.tools is not None)  # tools: only when this step changed them
        if not out.messages and is_renewal(messages):
            # A renewal is answered with the renewal message itself (nothing new from the task):
            # agentrl-eval's client rejects a running answer whose `messages` are empty.
            env_out["messages"] = messages
        return {"session_id": req.session_id, "env_out": env_out}

    @app.post("/api/cancel")
    async def cancel(request: Request) -> Response:
        req = parse_body(WorkerCancelRequest, await request.body())
        await service.cancel(req.session_id)
        return json_response({"session_id": req.session_id})

    @app.post("/api/cancel_with_notice")
    async def cancel_with_notice(request: Request) -> Response:
        # AgentRL's: answers at once; the controller gets POST cancel_notice once it is closed.
        req = parse_body(WorkerCancelRequest, await request.body())
        service.cancel_with_notice(req.session_id)
        return json_response({"session_id": req.session_id})

    @app.post("/api/cancel_all")
    async def cancel_all() -> Response:
        return json_response({"cancelled": await service.cancel_all()})

    @app.post("/api/cancel_all_with_notice")
    async def cancel_all_with_notice() -> Response:
        return json_response({"cancelled": service.cancel_all_with_notice()})

    @app.get("/api/get_sessions")
    async def get_sessions() -> Response:
        return json_response({str(k): v for k, v in service.get_sessions().items()})

    @app.get("/api/get_indices")
    async def get_indices() -> Response:
        return json_response(service.runtime.indices)

    @app.get("/api/worker_status", response_model=WorkerStatus)
    async def worker_status() -> Response:
        return json_response(service.status())

    @app.get("/health")
    async def health() -> Response:
        return json_response({"status": "ok", "task": service.name, **service.status()})

    return FastRoutes(
        app,
        {("POST", "/api/interact"): fast_interact, ("POST", "/api/start_sample"): fast_start_sample},
        auth=auth,
        default_role=WORKER,
        docs=_hot_route_docs(),
    )


def _hot_route_docs() -> APIRouter:
    """The hot routes as OpenAPI documents them (served by the transport, never by FastAPI)."""
    docs = APIRouter()

    @docs.post("/api/start_sample", response_model=EnvOutput)
    def start_sample(body: WorkerStartSampleRequest) -> None:
        """Start session ``session_id`` on sample ``index``: its first messages and its tools."""

    @docs.post("/api/interact", response_model=WorkerInteractResponse)
    def interact(body: WorkerInteractRequest) -> None:
        """One step of a session: the task's answer to the assistant's messages."""

    return docs
