"""The one schema module: OpenAI chat messages, tools, tool calls, and every wire body.

Everything that crosses a process boundary in agentrl-envs (client ↔ controller ↔ worker, the
built-in model server, the trainer) is one of these pydantic models. The wire protocol is
AgentRL's (see docs/protocol.md); field names and shapes must not change.

Conventions
-----------
* Messages follow OpenAI's chat format. ``ToolCall.function.arguments`` stays a JSON *string*
  exactly as the model produced it: invalid JSON is the env's business to answer, never a 422.
* Message models allow extra fields (``reasoning_content``, ``name``...) so nothing a client or
  an AgentRL worker sends is lost on the way through.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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


# --------------------------------------------------------------------------- chat messages


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    name: str
    arguments: str = Field(default="{}", description="JSON-encoded arguments, as the model wrote them")


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    """One OpenAI chat message (system, user, assistant or tool)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as plain text (multi-part content joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content)


def dump_messages(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI tool call (wire form): ``arguments`` serialized to the JSON string."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    """The tool's reply to call ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def worked_example(
    user: str, calls: list[tuple[str, dict[str, Any], str]], *, id_prefix: str = "example"
) -> list[dict[str, Any]]:
    """A demonstration exchange to open a conversation with (AgentBench's one-shot style): the
    ``user`` message, then per ``(tool name, arguments, tool output)`` an assistant turn calling
    that tool and the tool's reply. Call ids are deterministic (``{id_prefix}_{i}``), so every
    episode that opens with the same example renders the same prompt head.
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for i, (name, arguments, output) in enumerate(calls):
        call_id = f"{id_prefix}_{i}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [function_call(call_id, name, arguments)]})
        messages.append(tool_message(call_id, output))
    return messages


_RENEWAL_KEYS = frozenset(("role", "content", "tool_calls"))


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


# --------------------------------------------------------------------------- tools


class FunctionDefinition(_Open):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDefinition(_Open):
    type: Literal["function"] = "function"
    function: FunctionDefinition


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
        of those fields (tests check it), built by hand: a quarter of the cost per step (1.9 µs
        against 6.3 µs measured)."""
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


def client_view(env_out: dict[str, Any], *, tools: bool = False) -> dict[str, Any]:
    """A worker's ``env_out`` (decoded JSON) as the client protocol carries it: the body of
    :class:`StartSampleResponse` (``tools=True``) or :class:`InteractResponse`, with AgentRL's
    ``metric`` renamed ``metrics`` and missing fields defaulted. Plain dicts on the controller's
    hot path (tests check it equals the models' dump): the controller passes the worker's
    messages through without re-validating them."""
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
    return StartSampleResponse(
        messages=out.messages, tools=out.tools or [], finish=out.finish, reward=out.reward, status=out.status, metrics=out.metric
    )


def interact_response(out: EnvOutput) -> InteractResponse:
    """What a client sees of a worker's step."""
    return InteractResponse(
        finish=out.finish, reward=out.reward, status=out.status, messages=out.messages, metrics=out.metric, tools=out.tools
    )


class WorkerInteractResponse(BaseModel):
    session_id: int
    env_out: EnvOutput


class WorkerStatus(BaseModel):
    concurrency: int
    current: int


# --------------------------------------------------------------------------- errors


class ErrorBody(BaseModel):
    """The one shape every error response has (``detail`` as FastAPI writes it)."""

    detail: str
    error: str = Field(description="machine-readable error class, e.g. 'capacity_exceeded'")
    data: dict[str, Any] = Field(default_factory=dict)


# --------------------------------------------------------------------------- OpenAI chat API
# (the subset served by `agentrl-envs serve-model` and used by `agentrl-envs eval`)


class ChatCompletionRequest(_Open):
    model: str = "default"
    messages: list[Message]
    tools: list[ToolDefinition] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class ResponsesRequest(_Open):
    """``POST /v1/responses``, the subset the built-in server serves (see ``models.responses``)."""

    model: str = "default"
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    truncation: Literal["auto", "disabled"] | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    parallel_tool_calls: bool | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class ChatCompletionChoice(BaseModel):
    index: int = 0
    message: Message
    finish_reason: Literal["stop", "length", "tool_calls"] = "stop"


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage = Field(default_factory=Usage)
