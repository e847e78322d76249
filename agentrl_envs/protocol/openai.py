"""OpenAI's wire: chat messages, tools and tool calls, and the API subset the built-in model serves.

The messages, tools and tool calls are also what AgentRL's protocol (:mod:`.agentrl`) carries in
its bodies; the request and response models are those of ``agentrl-envs serve-model``
(:mod:`agentrl_envs.models.server` returns them, streaming chunks included) and of the clients
that call an OpenAI-compatible server.

Conventions
-----------
* ``ToolCall.function.arguments`` stays a JSON *string* exactly as the model produced it: invalid
  JSON is the env's business to answer, never a 422.
* Message models allow extra fields (``reasoning_content``, ``name``...) so nothing a client or
  an AgentRL worker sends is lost on the way through.
* A response model dumps (``model_dump(mode="json")``) to exactly the body OpenAI sends: keys
  OpenAI always sends are there even when null (``content``, ``refusal``, ``logprobs``), keys it
  sends only when set are left out when null (:class:`_Sparse`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

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


# --------------------------------------------------------------------------- tools


class FunctionDefinition(_Open):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDefinition(_Open):
    type: Literal["function"] = "function"
    function: FunctionDefinition


# --------------------------------------------------------------------------- requests
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


# --------------------------------------------------------------------------- chat completions


class _Sparse(BaseModel):
    """Dumps without its null fields: the parts of OpenAI's bodies whose keys come only when set
    (a stream delta, a message's ``tool_calls``)."""

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletionMessage(_Open):
    """An answer's message as OpenAI sends it: ``content`` and ``refusal`` always (null when
    none), every other field only when set (``tool_calls``, and extras such as
    ``reasoning_content``)."""

    role: Literal["assistant"] = "assistant"
    content: str | list[dict[str, Any]] | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None

    @model_serializer(mode="wrap")
    def _openai_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None or k in ("content", "refusal")}

    @classmethod
    def of(cls, message: Message) -> ChatCompletionMessage:
        """The answer form of a generated assistant message (its null fields dropped)."""
        return cls.model_validate(message.model_dump(exclude_none=True))


class ChatCompletionChoice(BaseModel):
    index: int = 0
    message: ChatCompletionMessage
    finish_reason: Literal["stop", "length", "tool_calls"] = "stop"
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage = Field(default_factory=Usage)


class ToolCallDelta(_Sparse):
    """One tool call in a stream: its head (``id``, ``type``, name, empty arguments), then its
    arguments, each under the call's ``index`` within the choice."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: dict[str, str] | None = None


class ChoiceDelta(_Sparse):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChoiceDelta
    logprobs: None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed completion; the last (with ``include_usage``) has no
    choices and the usage."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None

    @model_serializer(mode="wrap")
    def _usage_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body = handler(self)
        if body.get("usage") is None:
            body.pop("usage", None)
        return body


class StreamErrorDetail(BaseModel):
    message: str
    type: str
    code: str


class StreamError(BaseModel):
    """An error after a stream's headers are sent: it travels as an event, as OpenAI's does."""

    error: StreamErrorDetail


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "agentrl-envs"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# --------------------------------------------------------------------------- responses API


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: Literal["completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class OutputFunctionCall(BaseModel):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["completed"] = "completed"


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int] = Field(default_factory=lambda: {"cached_tokens": 0})
    output_tokens: int
    output_tokens_details: dict[str, int] = Field(default_factory=lambda: {"reasoning_tokens": 0})
    total_tokens: int


class ResponseObject(BaseModel):
    """``POST /v1/responses``'s answer (the fields OpenAI sends, as the built-in server fills them)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "incomplete"]
    incomplete_details: dict[str, str] | None = None
    error: None = None
    model: str
    instructions: str | None = None
    output: list[OutputMessage | OutputFunctionCall]
    parallel_tool_calls: bool = True
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    max_output_tokens: int | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning: None = None
    store: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)
    usage: ResponseUsage
