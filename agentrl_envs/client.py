"""Client of the controller's client API (AgentRL's protocol, docs/protocol.md), async and sync.

Errors map onto :mod:`agentrl_envs.errors`: a refused connection or a 5xx is an
:class:`~agentrl_envs.errors.InfrastructureError` (retry it), a 4xx about a session a
:class:`~agentrl_envs.errors.SessionError` (the caller's bug), except ``410 session_lost`` (the
session was opened on an earlier run of a controller that has since restarted):
:class:`~agentrl_envs.errors.SessionLostError`, an infrastructure failure (retry the sample).

Authentication (docs/security.md): ``token=`` (default: the ``AGENTRL_CLIENT_TOKEN`` environment
variable, else a token in the URL's userinfo, ``http://agentrl:TOKEN@host:5020``) is sent as
``Authorization: Bearer``; a ``401``/``403`` is :class:`~agentrl_envs.errors.AuthenticationError`
/ :class:`~agentrl_envs.errors.ForbiddenError`, a ``429`` :class:`~agentrl_envs.errors.QuotaExceededError`.
``verify``: a CA bundle path (an https controller with its own certificate), an
``ssl.SSLContext``, or True for the system store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from .errors import (
    AgentRLEnvsError,
    AuthenticationError,
    CapacityError,
    ControllerError,
    ForbiddenError,
    NoWorkerError,
    OverloadedError,
    QuotaExceededError,
    SessionBusyError,
    SessionError,
    SessionFinishedError,
    SessionLostError,
    UnknownSampleError,
    UnknownSessionError,
    WorkerUnreachableError,
)
from .protocol.agentrl import InteractResponse, SampleIndex, StartSampleResponse
from .protocol.openai import Message
from .transport.auth import CLIENT_TOKEN_ENV, bearer, env_token, split_userinfo

log = logging.getLogger(__name__)

_BY_CODE: dict[str, type[AgentRLEnvsError]] = {
    cls.code: cls
    for cls in (
        NoWorkerError,
        OverloadedError,
        WorkerUnreachableError,
        UnknownSessionError,
        UnknownSampleError,
        SessionBusyError,
        SessionFinishedError,
        SessionLostError,
        AuthenticationError,
        ForbiddenError,
        QuotaExceededError,
    )
}


def api_url(base_url: str) -> str:
    """Normalise a controller URL to its API prefix: ``http://h:p`` → ``http://h:p/api/``."""
    url = base_url.rstrip("/")
    if not url.endswith("/api"):
        url += "/api"
    return url + "/"


def _verify(verify: Any) -> Any:
    """A CA bundle path as the SSL context httpx wants; anything else as it is."""
    if isinstance(verify, str):
        import ssl

        return ssl.create_default_context(cafile=verify)
    return verify


def _auth(base_url: str, token: str | None) -> tuple[str, dict[str, str]]:
    """The URL without userinfo, and the header that carries the token (argument, env, URL)."""
    url, url_token = split_userinfo(base_url)
    return url, bearer(token or env_token(CLIENT_TOKEN_ENV) or url_token)


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    message = f"{response.request.method} {response.request.url.path} -> {response.status_code}: {detail or response.text[:500]}"
    code = body.get("error") if isinstance(body, dict) else None
    if response.status_code == 406:
        data = body.get("data", {}) if isinstance(body, dict) else {}
        raise CapacityError(message, active_sessions=data.get("active_sessions", -1), max_sessions=data.get("max_sessions", -1))
    if code in _BY_CODE:
        # The body's data rides along (e.g. session_finished's final ``status``).
        data = body.get("data") if isinstance(body, dict) else None
        extra = {k: v for k, v in data.items() if k != "message"} if isinstance(data, dict) else {}
        raise _BY_CODE[code](message, **extra)
    if response.status_code == 410:  # a session of an earlier run of a restarted controller
        raise SessionLostError(message)
    if 400 <= response.status_code < 500:
        raise SessionError(message, status_code=response.status_code)
    raise ControllerError(message, status_code=response.status_code, body=response.text[:2000])


def _messages(messages: list[dict[str, Any]] | list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) if isinstance(m, Message) else m for m in messages]


class AsyncControllerClient:
    """``async with AsyncControllerClient(url) as c: sid, first = await c.start_sample("db", 0)``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 300.0,
        max_connections: int = 1024,
        token: str | None = None,
        verify: Any = True,
    ) -> None:
        base_url, headers = _auth(base_url, token)
        self._http = httpx.AsyncClient(
            base_url=api_url(base_url),
            headers=headers,
            verify=_verify(verify),
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> AsyncControllerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise WorkerUnreachableError(f"controller at {self._http.base_url} unreachable: {e!r}") from e
        _raise_for(response)
        return response

    async def get_indices(self, task: str) -> list[SampleIndex]:
        return (await self._request("GET", "get_indices", params={"name": task})).json()

    async def start_sample(
        self, task: str, index: SampleIndex, custom_task: dict[str, Any] | None = None
    ) -> tuple[int, StartSampleResponse]:
        body = {"name": task, "index": index, "custom_task": custom_task}
        response = await self._request("POST", "start_sample", json=body)
        return int(response.headers["session_id"]), StartSampleResponse.model_validate(response.json())

    async def interact(self, session_id: int, messages: list[dict[str, Any]] | list[Message]) -> InteractResponse:
        response = await self._request(
            "POST", "interact", headers={"session_id": str(session_id)}, json={"messages": _messages(messages)}
        )
        return InteractResponse.model_validate(response.json())

    async def start_sample_when_free(
        self, task: str, index: SampleIndex, *, timeout: float, delay: Callable[[int], float]
    ) -> tuple[int, StartSampleResponse]:
        """:meth:`start_sample`, retried while no worker slot is free (:class:`CapacityError`)
        until ``timeout`` seconds have passed; retry ``n`` (from 0) first sleeps ``delay(n)`` s."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            try:
                return await self.start_sample(task, index)
            except CapacityError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(delay(attempt))
                attempt += 1

    async def cancel(self, session_id: int) -> None:
        await self._request("POST", "cancel", headers={"session_id": str(session_id)})

    async def cancel_quietly(self, session_id: int) -> None:
        """Best-effort :meth:`cancel` (the session may be gone already): failures are only logged."""
        try:
            await self.cancel(session_id)
        except Exception as e:
            log.debug("cancel of session %s failed: %r", session_id, e)

    async def list_workers(self) -> Any:
        return (await self._request("GET", "list_workers")).json()

    async def list_sessions(self) -> Any:
        return (await self._request("GET", "list_sessions")).json()


class ControllerClient:
    """The synchronous twin of :class:`AsyncControllerClient` (used by the gymnasium env)."""

    def __init__(self, base_url: str, *, timeout: float = 300.0, token: str | None = None, verify: Any = True) -> None:
        base_url, headers = _auth(base_url, token)
        self._http = httpx.Client(
            base_url=api_url(base_url), headers=headers, verify=_verify(verify), timeout=httpx.Timeout(timeout, connect=10.0)
        )

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise WorkerUnreachableError(f"controller at {self._http.base_url} unreachable: {e!r}") from e
        _raise_for(response)
        return response

    def get_indices(self, task: str) -> list[SampleIndex]:
        return self._request("GET", "get_indices", params={"name": task}).json()

    def start_sample(
        self, task: str, index: SampleIndex, custom_task: dict[str, Any] | None = None
    ) -> tuple[int, StartSampleResponse]:
        response = self._request("POST", "start_sample", json={"name": task, "index": index, "custom_task": custom_task})
        return int(response.headers["session_id"]), StartSampleResponse.model_validate(response.json())

    def interact(self, session_id: int, messages: list[dict[str, Any]] | list[Message]) -> InteractResponse:
        response = self._request(
            "POST", "interact", headers={"session_id": str(session_id)}, json={"messages": _messages(messages)}
        )
        return InteractResponse.model_validate(response.json())

    def cancel(self, session_id: int) -> None:
        self._request("POST", "cancel", headers={"session_id": str(session_id)})
