"""AgentRL's wire: the statuses and every body between client, controller and worker.

Everything that crosses the client ↔ controller ↔ worker hops is one of these pydantic models
(the messages and tools inside them are OpenAI's, :mod:`.openai`). Field names and shapes are
AgentRL's (docs/protocol.md) and must not change.

The hot path builds two bodies by hand, for speed, each in one place: a worker's
(:meth:`EnvOutput.wire`) and every reply to a client (:func:`client_view`: the controller's
answers to ``start_sample`` and ``interact``, its own failures and renewals included, and the
in-process loop's :func:`start_response` / :func:`interact_response`). ``tests/test_schema.py``
checks both equal the models' dumps.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from .openai import Message

SampleIndex = int | str

# --------------------------------------------------------------------------- statuses


class SampleStatus(str, Enum):
    """Session statuses of AgentRL's protocol (values are wire strings)."""

    RUNNING = "running"
    COMPLETED = "completed"
    AGENT_CONTEXT_LIMIT = "agent context limit"
    AGENT_VALIDATION_FAILED = "agent validation failed"
    AGENT_INVALID_ACTION = "agent invalid action"
    TASK_LIMIT_REACHED = "task limit reached"
    UNKNOWN = "unknown"
    TASK_ERROR = "task error"
    CANCELLED = "cancelled"

    @property
    def is_infrastructure_failure(self) -> bool:
        """True when nobody can blame the model: retry or drop, never score 0."""
        return self in (SampleStatus.TASK_ERROR, SampleStatus.CANCELLED)


_RENEWAL_KEYS = frozenset(("role", "content", "tool_calls"))


def renewal() -> dict[str, Any]:
    """A session renewal's one message, as agentrl-eval's ``ControllerClient.renew`` sends it
    (:func:`is_renewal`): ``interact(session_id, [renewal()])`` restarts the session's idle clock."""
    return {"role": "assistant", "content": ""}


def is_renewal(messages: list[Any]) -> bool:
    """Whether an interact's ``messages`` are a session renewal, not a step: exactly one message,
    a dict with ``role`` ``assistant``, ``content`` exactly ``""`` (an empty string: ``null`` or
    a missing content is an ordinary empty reply) and no tool calls (``tool_calls`` absent, null
    or ``[]``), and no other field (an empty reply that carries ``reasoning_content`` is a step).
    agentrl-eval's ``ControllerClient.renew`` sends ``{"role": "assistant", "content": ""}`` every
    180 s while the model thinks, to keep the session from idling out. Cheap on the hot path: a
    real step fails the first or second test."""
    if len(messages) != 1:
        return False
    m = messages[0]
    return (
        type(m) is dict
        and m.get("content") == ""
        and m.get("role") == "assistant"
        and not m.get("tool_calls")
        and m.keys() <= _RENEWAL_KEYS
    )


# --------------------------------------------------------------------------- client ↔ controller


class StartSampleRequest(BaseModel):
    name: str
    index: SampleIndex
    custom_task: dict[str, Any] | None = None


class InteractRequest(BaseModel):
    """Body of ``POST /api/interact``; the session is named in the ``session_id`` header."""

    messages: list[Message]


class StartSampleResponse(BaseModel):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    # AgentRL's controller passes these through from the worker; clients may ignore them.
    finish: bool = False
    reward: float = 0.0
    status: SampleStatus = SampleStatus.RUNNING
    metrics: dict[str, Any] = Field(default_factory=dict)


class InteractResponse(BaseModel):
    finish: bool
    reward: float
    status: SampleStatus
    messages: list[dict[str, Any]] = Field(default_factory=list, description="only the new messages")
    metrics: dict[str, Any] = Field(default_factory=dict)
    # Our addition (absent from AgentRL's protocol, which clients ignore): the session's tools,
    # only when this step changed them (BFCL's held-back functions); absent or null otherwise.
    tools: list[dict[str, Any]] | None = None


class MarkStaleRequest(BaseModel):
    name: str
    worker_id: str
    stale: bool = True


# --------------------------------------------------------------------------- worker ↔ controller


class HeartbeatRequest(BaseModel):
    name: str
    address: str
    concurrency: int
    indices: list[SampleIndex] = Field(default_factory=list)
    # Our addition (AgentRL's gRPC heartbeat has it; its HTTP one does not): one id per run of the
    # worker process, so a worker restarted at the same address is told apart from the run before.
    id: str | None = None


class WorkerStartSampleRequest(BaseModel):
    index: SampleIndex
    custom_task: dict[str, Any] | None = None
    session_id: int


class WorkerInteractRequest(BaseModel):
    session_id: int
    messages: list[dict[str, Any]] | None = None


class WorkerCancelRequest(BaseModel):
    session_id: int


class EnvOutput(BaseModel):
    """What a worker reports after a start or a step (AgentRL calls the metrics ``metric``)."""

    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    status: SampleStatus = SampleStatus.RUNNING
    finish: bool = False
    reward: float = 0.0
    metric: dict[str, Any] = Field(default_factory=dict)

    def wire(self, *, tools: bool) -> dict[str, Any]:
        """The worker protocol's body for this output: with ``tools`` after a start (and after a
        step that changed them), without after other steps. Equal to ``model_dump(mode="json")``
        of those fields (tests check it), built by hand: a fraction of the dump's cost per step
        (docs/performance.md)."""
        body: dict[str, Any] = {
            "messages": self.messages,
            "status": self.status.value,
            "finish": self.finish,
            "reward": self.reward,
            "metric": self.metric,
        }
        if tools:
            body["tools"] = self.tools or []
        return body


class WorkerInteractResponse(BaseModel):
    session_id: int
    env_out: EnvOutput


class WorkerStatus(BaseModel):
    concurrency: int
    current: int


# --------------------------------------------------------------------------- replies to a client


def client_view(env_out: Mapping[str, Any], *, tools: bool = False) -> dict[str, Any]:
    """The one builder of a reply to a client: a worker's ``env_out`` (decoded JSON, or any part
    of one: missing fields take their defaults) as the client protocol carries it, the body of
    :class:`StartSampleResponse` (``tools=True``) or :class:`InteractResponse`, with AgentRL's
    ``metric`` renamed ``metrics``. The controller's own answers (a session that failed, a
    renewal) are views of the ``env_out`` it stands in for. Plain dicts on the controller's hot
    path (tests check it equals the models' dump): the worker's messages pass through without
    being validated again."""
    out = {
        "finish": bool(env_out.get("finish", False)),
        "reward": env_out.get("reward", 0) or 0,
        "status": env_out.get("status", SampleStatus.RUNNING.value),
        "messages": env_out.get("messages") or [],
        "metrics": env_out.get("metric") or env_out.get("metrics") or {},
    }
    if tools:
        out["tools"] = env_out.get("tools") or []
    elif env_out.get("tools") is not None:  # a step that changed the session's tools
        out["tools"] = env_out["tools"]
    return out


def start_response(out: EnvOutput) -> StartSampleResponse:
    """What a client sees of a worker's start (metrics named as the client API names them)."""
    return StartSampleResponse.model_validate(client_view(out.wire(tools=True), tools=True))


def interact_response(out: EnvOutput) -> InteractResponse:
    """What a client sees of a worker's step."""
    return InteractResponse.model_validate(client_view(out.wire(tools=out.tools is not None)))


# --------------------------------------------------------------------------- errors


class ErrorBody(BaseModel):
    """The one shape every error response has (``detail`` as FastAPI writes it)."""

    detail: str
    error: str = Field(description="machine-readable error class, e.g. 'capacity_exceeded'")
    data: dict[str, Any] = Field(default_factory=dict)
