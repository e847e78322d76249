"""Exceptions of agentrl-envs, split by who is at fault.

AgentRLEnvsError
├── InternalError              a bug: an exception nothing expected (HTTP 500)
├── ModelError                 the model's action was bad; answered to the model, scored
│   ├── ToolCallError          bad tool call: invalid JSON, unknown tool, wrong arguments
│   └── ContextLimitError      the conversation no longer fits the model ("agent context limit")
├── TaskError                  the task itself failed (bug, broken data); status "task error"
│   ├── DataError              a split or data file is missing or malformed
│   └── SandboxError           a sandbox could not start or died (sandbox.base)
│       └── SandboxStoppedError  what ran in it stopped it (its shell exited, was killed, hung)
├── InfrastructureError        the transport failed; retried or dropped, never scored 0
│   ├── CapacityError          the worker is full (HTTP 406), carries active/max sessions
│   ├── NoWorkerError          no live worker serves the task (HTTP 503)
│   ├── OverloadedError        the server is at its connection limit (HTTP 503, sent by the HTTP layer)
│   ├── WorkerUnreachableError the worker died or cannot be reached
│   │   └── UpstreamError      the controller's request to a worker failed (transport.upstream)
│   ├── SessionLostError       the session was opened on an earlier run of a restarted controller (HTTP 410)
│   ├── ControllerError        a controller request failed (carries status code and body)
│   ├── ModelServerError       the model (policy) server failed or answered nothing usable
│   ├── ModelLoadError         the built-in model's weights could not be loaded (chat.errors)
│   └── DockerUnavailable      no Docker engine answers (containers.engine)
├── BuildError                 a worker image failed to build (containers.build)
└── SessionError               the client misused the API (HTTP 4xx)
    ├── InvalidRequestError    a body that is not what the endpoint takes (HTTP 422)
    ├── UnknownSampleError     no such sample index in the task
    ├── UnknownSessionError    no such session (it never existed, expired or ended)
    ├── SessionBusyError       an interact is already in flight for the session
    ├── SessionFinishedError   the episode has already ended
    ├── ConfirmationRequiredError  cancel_all of every task without force=true (HTTP 403)
    ├── AuthenticationError    no token, or a wrong one (HTTP 401; transport.auth)
    ├── ForbiddenError         a token without the role the route needs (HTTP 403)
    ├── QuotaExceededError     the client's token is over its session or start-rate quota (HTTP 429)
    ├── RequestRejectedError   the HTTP layer refused the request itself (transport)
    │   ├── RequestTooLargeError   a body over the size limit (HTTP 413)
    │   ├── HeadersTooLargeError   too many or too large headers (HTTP 431)
    │   └── RequestTimeoutError    the request was not read in time: slow-loris (HTTP 408)
    └── BadModelRequestError   the model server cannot serve the request as asked (HTTP 400, chat.errors)
        └── ContextLengthError the prompt does not fit the model's context

Each class has its own ``code`` (the wire's ``error`` field): one code, one class.
"""

from __future__ import annotations

from typing import Any


class AgentRLEnvsError(Exception):
    """Base class: ``code`` is the machine-readable name sent on the wire."""

    code = "error"
    http_status = 500

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InternalError(AgentRLEnvsError):
    """An exception nothing expected (a bug); the server logs its traceback."""

    code = "internal_error"
    http_status = 500


class ModelError(AgentRLEnvsError):
    code = "model_error"
    http_status = 400


class ToolCallError(ModelError):
    code = "tool_call_error"


class ContextLimitError(ModelError):
    """Raised by a policy whose prompt no longer fits its model: the episode ends ``agent context limit``."""

    code = "agent_context_limit"


class TaskError(AgentRLEnvsError):
    code = "task_error"


class DataError(TaskError):
    code = "data_error"


class InfrastructureError(AgentRLEnvsError):
    code = "infrastructure_error"
    http_status = 502


class CapacityError(InfrastructureError):
    code = "capacity_exceeded"
    http_status = 406

    def __init__(self, message: str, *, active_sessions: int, max_sessions: int) -> None:
        super().__init__(message, active_sessions=active_sessions, max_sessions=max_sessions)
        self.active_sessions = active_sessions
        self.max_sessions = max_sessions


class NoWorkerError(InfrastructureError):
    code = "no_worker"
    http_status = 503


class OverloadedError(InfrastructureError):
    """A controller or worker refused a connection past its limit (``ulimit -n``): retry later."""

    code = "overloaded"
    http_status = 503


class WorkerUnreachableError(InfrastructureError):
    code = "worker_unreachable"
    http_status = 502


class SessionLostError(InfrastructureError):
    """The session was opened on an earlier run of the controller, which has since restarted and
    no longer knows it: the episode is lost through no fault of the model; retry the sample."""

    code = "session_lost"
    http_status = 410


class ControllerError(InfrastructureError):
    code = "controller_error"

    def __init__(self, message: str, *, status_code: int, body: str = "") -> None:
        super().__init__(message, status_code=status_code, body=body)
        self.status_code = status_code
        self.body = body


class ModelServerError(InfrastructureError):
    """The policy's model server failed (an API error, no choices): retry, never score."""

    code = "model_server_error"


class SessionError(AgentRLEnvsError):
    code = "session_error"
    http_status = 400


class InvalidRequestError(SessionError):
    code = "invalid_request"
    http_status = 422


class UnknownSampleError(SessionError):
    code = "unknown_sample"
    http_status = 404


class UnknownSessionError(SessionError):
    code = "unknown_session"
    http_status = 404


class SessionBusyError(SessionError):
    code = "session_busy"
    http_status = 409


class ConfirmationRequiredError(SessionError):
    """``cancel_all`` without ``name`` while several tasks are registered, and without ``force``."""

    code = "confirmation_required"
    http_status = 403


class SessionFinishedError(SessionError):
    code = "session_finished"
    http_status = 409


class AuthenticationError(SessionError):
    """No token, or one this server does not know (docs/security.md)."""

    code = "unauthorized"
    http_status = 401


class ForbiddenError(SessionError):
    """A valid token without the role the route needs (a client token on a worker route)."""

    code = "forbidden"
    http_status = 403


class QuotaExceededError(SessionError):
    """The client's token is over a quota: ``data`` names the ``limit`` (``max_sessions`` or
    ``starts_per_minute``), its value, and for the rate ``retry_after_s``."""

    code = "quota_exceeded"
    http_status = 429


class RequestRejectedError(SessionError):
    """The HTTP layer refused the request before any route saw it."""

    code = "request_rejected"
    http_status = 400


class RequestTooLargeError(RequestRejectedError):
    code = "request_too_large"
    http_status = 413


class HeadersTooLargeError(RequestRejectedError):
    code = "headers_too_large"
    http_status = 431


class RequestTimeoutError(RequestRejectedError):
    code = "request_timeout"
    http_status = 408
