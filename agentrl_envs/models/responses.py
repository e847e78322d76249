"""OpenAI's Responses API onto chat: the subset of ``POST /v1/responses`` the built-in server serves.

Served: ``input`` as a string or a list of items — messages (``role`` system, developer, user or
assistant; ``content`` a string or ``input_text`` / ``output_text`` parts), ``function_call`` and
``function_call_output`` items (as ``agentrl-eval`` and the ``openai`` SDK send them, extra fields
such as ``id`` and ``status`` ignored), ``reasoning`` items (dropped) —, ``instructions``, function
``tools`` (flat: ``{"type": "function", "name", "description", "parameters"}``), ``tool_choice``
(``auto``, ``none``, ``required``, ``{"type": "function", "name"}``), ``max_output_tokens``,
``temperature``, ``top_p``, ``truncation`` (``auto`` drops the oldest turns after the first user
message until the prompt fits), ``parallel_tool_calls``, ``metadata`` and ``prompt_cache_key``
(accepted, no effect). The answer: a ``response`` object whose ``output`` holds a ``message`` item
(``output_text``) and/or ``function_call`` items, with ``usage`` in the Responses API's names and
``status`` ``incomplete`` (reason ``max_output_tokens``) when the budget ran out.

Refused with HTTP 400: ``stream``, ``previous_response_id`` (nothing is stored), ``store: true``,
``reasoning`` effort, non-function tools, a ``text.format`` other than text, images and files.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ..chat.engine import ChatGeneration
from ..chat.errors import BadModelRequestError
from ..protocol.openai import (
    FunctionCall,
    FunctionDefinition,
    Message,
    OutputFunctionCall,
    OutputMessage,
    OutputText,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    ToolCall,
    ToolDefinition,
)

__all__ = ["to_chat", "to_response", "truncate"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _text(content: Any, where: str) -> str:
    """The text of a content string or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise BadModelRequestError(f"{where}: content must be a string or a list of parts", param="input")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            texts.append(part.get("text") or "")
        elif kind == "refusal":
            texts.append(part.get("refusal") or "")
        else:
            raise BadModelRequestError(f"{where}: content parts of type {kind!r} are not supported (text only)", param="input")
    return "".join(texts)


def _check(req: ResponsesRequest) -> None:
    if req.stream:
        raise BadModelRequestError("streaming is not supported on /v1/responses; send stream=false", param="stream")
    if req.previous_response_id:
        raise BadModelRequestError(
            "previous_response_id is not supported: responses are not stored", param="previous_response_id"
        )
    if req.store:
        raise BadModelRequestError("store=true is not supported: responses are not stored", param="store")
    if req.reasoning and (req.reasoning.get("effort") or req.reasoning.get("summary")):
        raise BadModelRequestError("reasoning is not supported by the built-in model", param="reasoning")
    fmt = (req.text or {}).get("format")
    if fmt not in (None, {"type": "text"}):
        raise BadModelRequestError("text.format other than text is not supported", param="text")
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise BadModelRequestError(
            f"max_output_tokens must be at least 1, got {req.max_output_tokens}", param="max_output_tokens"
        )
    if req.temperature is not None and not 0 <= req.temperature <= 2:
        raise BadModelRequestError(f"temperature must be in [0, 2], got {req.temperature}", param="temperature")
    if req.top_p is not None and not 0 < req.top_p <= 1:
        raise BadModelRequestError(f"top_p must be in (0, 1], got {req.top_p}", param="top_p")


def _tools(req: ResponsesRequest) -> list[ToolDefinition] | None:
    tools = []
    for i, t in enumerate(req.tools or []):
        if t.get("type") != "function" or not t.get("name"):
            raise BadModelRequestError(
                f"tools[{i}]: only function tools ({{'type': 'function', 'name': ...}}) are supported", param="tools"
            )
        params = t.get("parameters") or {"type": "object", "properties": {}}
        tools.append(
            ToolDefinition(function=FunctionDefinition(name=t["name"], description=t.get("description") or "", parameters=params))
        )
    return tools or None


def _tool_choice(choice: Any, tools: list[ToolDefinition] | None) -> Any:
    """The chat-completions form of a Responses ``tool_choice``."""
    if choice in (None, "auto", "none", "required"):
        if choice == "required" and not tools:
            raise BadModelRequestError("tool_choice forces a tool call but no tools were given", param="tool_choice")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadModelRequestError(
        'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}', param="tool_choice"
    )


def to_chat(req: ResponsesRequest) -> tuple[list[Message], list[ToolDefinition] | None, Any]:
    """``(messages, tools, tool_choice)`` of a Responses request; unsupported parts raise
    :class:`BadModelRequestError` (HTTP 400)."""
    _check(req)
    messages: list[Message] = []
    if req.instructions:
        messages.append(Message(role="system", content=req.instructions))
    items = [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadModelRequestError(f"{where}: an input item must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = _ROLES.get(item.get("role", ""))
            if role is None:
                raise BadModelRequestError(f"{where}: role {item.get('role')!r} is not supported", param="input")
            text = _text(item.get("content"), where)
            if role == "system" and messages and messages[-1].role == "system":  # instructions + developer
                messages[-1] = Message(role="system", content=f"{messages[-1].content}\n\n{text}")
            else:
                messages.append(Message(role=role, content=text))
        elif kind == "function_call":
            call = ToolCall(
                id=item.get("call_id") or item.get("id") or "call_" + uuid.uuid4().hex[:24],
                function=FunctionCall(name=item.get("name", ""), arguments=item.get("arguments") or "{}"),
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":  # calls join the assistant turn they follow
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(Message(role="assistant", content=None, tool_calls=[call]))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, where)
            messages.append(Message(role="tool", tool_call_id=item.get("call_id"), content=text))
        elif kind == "reasoning":
            continue  # the built-in model does not reason in a separate channel
        else:
            raise BadModelRequestError(f"{where}: input items of type {kind!r} are not supported", param="input")
    if not any(m.role != "system" for m in messages):
        raise BadModelRequestError("input has no message", param="input")
    tools = _tools(req)
    choice = _tool_choice(req.tool_choice, tools)
    if choice == "none":
        tools, choice = None, None
    return messages, tools, choice


async def truncate(
    backend: Any, messages: list[Message], tools: Sequence[ToolDefinition] | None, tool_choice: Any
) -> list[Message]:
    """``truncation: "auto"``: drop the oldest turns after the first user message until the prompt
    fits the context window (with room for an answer); a backend that cannot measure prompts
    gets the messages unchanged."""
    prepare = getattr(backend, "prepare", None)
    if prepare is None:
        return messages
    keep = next((i for i, m in enumerate(messages) if m.role == "user"), 0) + 1  # system + the task
    messages = list(messages)
    while True:
        prepared = await prepare(messages, tools, tool_choice)
        room = getattr(backend, "max_context", 0) - len(prepared.prompt_ids)
        if room >= min(256, getattr(backend, "default_max_tokens", 256)):
            return messages
        if len(messages) <= keep:
            return messages  # nothing left to drop: the request fails or runs short, as it is
        del messages[keep]
        while len(messages) > keep and messages[keep].role == "tool":  # no output without its call
            del messages[keep]


def to_response(req: ResponsesRequest, generation: ChatGeneration, model: str) -> ResponseObject:
    """The ``response`` object of one generation."""
    message, finish, usage = generation
    incomplete = finish == "length"
    output: list[OutputMessage | OutputFunctionCall] = []
    if message.content:
        output.append(
            OutputMessage(
                id="msg_" + uuid.uuid4().hex,
                status="incomplete" if incomplete else "completed",
                content=[OutputText(text=message.content)],
            )
        )
    for call in message.tool_calls or []:
        arguments = call.function.arguments
        output.append(
            OutputFunctionCall(
                id="fc_" + uuid.uuid4().hex,
                call_id=call.id,
                name=call.function.name,
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    return ResponseObject(
        id="resp_" + uuid.uuid4().hex,
        created_at=int(time.time()),
        status="incomplete" if incomplete else "completed",
        incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
        model=model,
        instructions=req.instructions,
        output=output,
        parallel_tool_calls=req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
        tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
        tools=req.tools or [],
        temperature=req.temperature if req.temperature is not None else 1.0,
        top_p=req.top_p if req.top_p is not None else 1.0,
        max_output_tokens=req.max_output_tokens,
        truncation=req.truncation or "disabled",
        metadata=req.metadata or {},
        usage=ResponseUsage(
            input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens, total_tokens=usage.total_tokens
        ),
    )
