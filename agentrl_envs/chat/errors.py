"""Exceptions of the model server (all are :class:`agentrl_envs.errors.AgentRLEnvsError`).

AgentRLEnvsError
├── InfrastructureError
│   └── ModelLoadError          the weights could not be found or loaded
└── SessionError
    └── BadModelRequestError    the request cannot be served as asked (HTTP 400)
        └── ContextLengthError  prompt too long for the model's context window
"""

from __future__ import annotations

from ..errors import InfrastructureError, SessionError


class ModelLoadError(InfrastructureError):
    code = "model_load_error"
    http_status = 500


class BadModelRequestError(SessionError):
    """A well-formed request the server cannot serve as asked (unsupported parameter, value out of
    range). Not ``invalid_request``: that code is a body failing validation (HTTP 422)."""

    code = "bad_request"
    http_status = 400


class ContextLengthError(BadModelRequestError):
    code = "context_length_exceeded"

    def __init__(self, message: str, *, prompt_tokens: int, max_context: int) -> None:
        super().__init__(message, prompt_tokens=prompt_tokens, max_context=max_context)
        self.prompt_tokens = prompt_tokens
        self.max_context = max_context
