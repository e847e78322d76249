"""The one error shape, and how a hot route's handler becomes the answer on the wire.

Every error leaves as ``{"detail": str, "error": code, "data": {...}}``
(:class:`~agentrl_envs.protocol.agentrl.ErrorBody`) with the status code of its exception class;
a body that fails validation is a 422 whose detail names the offending field.

A hot route's handler (:data:`FastHandler`) is run by :func:`dispatch`, the one dispatch path
of the three ways a hot request arrives (an HTTP/1.1 request answered by the protocol itself, a
frame on a multiplexed connection, an ASGI request): it gets the request headers and raw body and
gives its JSON-able answer at once or as an awaitable of it, errors raised at once or through the
awaitable; :func:`dispatch` hands the finished :data:`Answer` to the caller's callback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from types import CoroutineType
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from ..errors import AgentRLEnvsError, InternalError, InvalidRequestError

log = logging.getLogger(__name__)


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, headers=headers, media_type="application/json")


def error_payload(err: AgentRLEnvsError) -> bytes:
    """The one error body, serialised: every error leaves through here."""
    return orjson.dumps({"detail": err.message, "error": err.code, "data": err.data})


def as_wire_error(exc: BaseException, where: str = "") -> AgentRLEnvsError:
    """Any exception as the error the wire carries: ours as they are, a validation failure as
    :class:`InvalidRequestError`, anything else as :class:`InternalError` (logged: a bug)."""
    if isinstance(exc, AgentRLEnvsError):
        return exc
    if isinstance(exc, (ValidationError, RequestValidationError)):
        return InvalidRequestError(_validation_detail(list(exc.errors())))
    log.exception("unhandled error%s", f" on {where}" if where else "", exc_info=exc)
    return InternalError(f"{type(exc).__name__}: {exc}")


def error_response(exc: BaseException) -> Response:
    err = as_wire_error(exc)
    return Response(error_payload(err), status_code=err.http_status, media_type="application/json")


def _validation_detail(errors: list[Any]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg')}")
    return "invalid request body: " + "; ".join(parts)


def parse_body(model: type[BaseModel], raw: bytes) -> Any:
    """Validate a raw JSON body (pydantic's Rust parser: faster than FastAPI's own path)."""
    return model.model_validate_json(raw or b"null")


# A hot route's handler: the request's headers (``PRINCIPAL`` among them, see .routes) and raw
# body in; out, its JSON-able answer (or a WithHeaders), either at once or as an awaitable of it:
# a coroutine (run as a task) or a future (answered from its done-callback, no task: the
# controller's step on a multiplexed worker connection, see controller.sessions). Errors are
# raised, at once or through the awaitable, and leave in the one error shape.
FastHandler = Callable[[dict[bytes, bytes], bytes], Any]

Answer = tuple[int, dict[str, str], bytes]  # status, extra response headers, JSON payload


class WithHeaders:
    """What a fast handler returns to add response headers to its JSON body."""

    __slots__ = ("body", "headers")

    def __init__(self, body: Any, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


def encode_answer(result: Any, where: str) -> Answer:
    try:
        if type(result) is WithHeaders:
            return 200, result.headers, orjson.dumps(result.body)
        return 200, {}, orjson.dumps(result)
    except Exception as e:  # not serialisable: a bug, reported as one
        return encode_failure(e, where)


def encode_failure(exc: BaseException, where: str) -> Answer:
    err = as_wire_error(exc, where)
    return err.http_status, {}, error_payload(err)


def _settled(where: str, done: Callable[[Answer], None], tasks: set[Any], fut: asyncio.Future[Any]) -> None:
    """A done future's answer to ``done`` (a cancelled one is an internal error: nothing should cancel it)."""
    tasks.discard(fut)
    if fut.cancelled():
        done(encode_failure(InternalError("the request was cancelled"), where))
    elif (exc := fut.exception()) is not None:
        done(encode_failure(exc, where))
    else:
        done(encode_answer(fut.result(), where))


async def _awaited(pending: Any, where: str, done: Callable[[Answer], None]) -> None:
    try:
        result = await pending
    except Exception as e:
        done(encode_failure(e, where))
    except asyncio.CancelledError:  # a server stopping past its grace period: answered all the same
        done(encode_failure(InternalError("the request was cancelled"), where))
        raise
    else:
        done(encode_answer(result, where))


def dispatch(
    handler: FastHandler,
    headers: dict[bytes, bytes],
    body: bytes,
    where: str,
    done: Callable[[Answer], None],
    loop: asyncio.AbstractEventLoop,
    tasks: set[Any],
) -> None:
    """Run a hot route's handler; ``done`` gets its :data:`Answer`, now or from ``loop`` (the
    running one, passed in: asking for it costs a system call). What is still running (a task,
    or the handler's future) is in ``tasks`` until it is done: the server's, whose shutdown waits
    for them. ``where`` names the route in logged bugs."""
    try:
        result = handler(headers, body)
    except Exception as e:
        done(encode_failure(e, where))
        return
    if type(result) is CoroutineType:
        task = loop.create_task(_awaited(result, where, done))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    elif asyncio.isfuture(result):
        # Answered from the future's own callback: no task and no extra event-loop turn.
        tasks.add(result)
        result.add_done_callback(partial(_settled, where, done, tasks))
    else:
        done(encode_answer(result, where))
