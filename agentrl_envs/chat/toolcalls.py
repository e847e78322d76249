"""Tool calls in and out of a chat model's text: render the prompt, parse the completion.

Pure functions, shared by the model server and the RL trainer, so that the text a policy is
trained on is exactly the text it is served with.

Prompt format
-------------
If the tokenizer's chat template knows about tools (it mentions ``tools``), it is used natively.
Otherwise (SmolLM2's plain ChatML template) the conversation is rewritten Hermes/Qwen2.5-style
before the template is applied:

* the tool definitions go into the system message, under a ``# Tools`` section with one JSON
  line per tool between ``<tools></tools>`` and the instruction to answer with
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* an assistant message's ``tool_calls`` become ``<tool_call>`` blocks after its content;
* consecutive ``tool`` messages become one ``user`` turn of ``<tool_response>`` blocks.

Completion format
-----------------
:func:`parse_completion` accepts ``<tool_call>...</tool_call>`` blocks (several, the last one may
be unterminated) and, leniently, a bare or code-fenced JSON object with ``name`` and
``arguments`` (or ``parameters``) keys. It never raises and never drops a call: a block whose
JSON is invalid still yields a :class:`ToolCall` whose ``arguments`` is the raw text, so the
environment can answer "invalid JSON" to the model.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..protocol.openai import FunctionCall, Message, ToolCall, ToolDefinition

__all__ = [
    "ParsedCompletion",
    "new_tool_call_id",
    "parse_completion",
    "render_prompt",
    "to_template_messages",
    "tools_system_section",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
TOOL_CALL_OPEN = "<tool_call>"  # the tag that opens a call in a completion

_TOOLS_HEADER = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_FOOTER = (
    "</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


class ChatTemplateTokenizer(Protocol):
    """The part of a Hugging Face tokenizer that :func:`render_prompt` uses."""

    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


# --------------------------------------------------------------------------- rendering


def _tool_dict(tool: ToolDefinition | dict[str, Any]) -> dict[str, Any]:
    if isinstance(tool, ToolDefinition):
        return tool.model_dump(mode="json", exclude_none=True)
    return dict(tool)


def tools_system_section(tools: Sequence[ToolDefinition | dict[str, Any]]) -> str:
    """The Hermes/Qwen2.5 ``# Tools`` section that is appended to the system message."""
    lines = [json.dumps(_tool_dict(t), ensure_ascii=False) for t in tools]
    return "\n".join([_TOOLS_HEADER, *lines, _TOOLS_FOOTER])


def _arguments_text(arguments: str) -> str:
    """Arguments as written into a ``<tool_call>`` block: the model's own string, verbatim."""
    return arguments.strip() or "{}"


def _tool_call_block(call: ToolCall) -> str:
    name = json.dumps(call.function.name, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {name}, "arguments": {_arguments_text(call.function.arguments)}}}\n</tool_call>'


def to_template_messages(
    messages: Sequence[Message], tools: Sequence[ToolDefinition | dict[str, Any]] | None = None
) -> list[dict[str, str]]:
    """Rewrite an OpenAI conversation into plain ``{"role", "content"}`` dicts (Hermes style).

    Roles out are ``system``, ``user`` and ``assistant`` only, so any ChatML template renders
    them. ``developer`` counts as ``system``. With ``tools``, the tools section is appended to
    the first system message (one is created, with :data:`DEFAULT_SYSTEM_PROMPT`, if missing).
    """
    out: list[dict[str, str]] = []
    for msg in messages:
        role, text = msg.role, msg.text()
        if role in ("system", "developer"):
            out.append({"role": "system", "content": text})
        elif role == "assistant":
            blocks = [_tool_call_block(c) for c in msg.tool_calls or []]
            out.append({"role": "assistant", "content": "\n".join(([text] if text else []) + blocks)})
        elif role == "tool":
            block = f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool") == "1":
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": "1"})
        else:
            out.append({"role": "user", "content": text})
    for m in out:
        m.pop("_tool", None)
    if tools:
        section = tools_system_section(tools)
        if out and out[0]["role"] == "system":
            base = out[0]["content"].rstrip()
            out[0]["content"] = f"{base}\n\n{section}" if base else section
        else:
            out.insert(0, {"role": "system", "content": f"{DEFAULT_SYSTEM_PROMPT}\n\n{section}"})
    return out


def _native_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI messages as HF tool-aware templates expect them (arguments as objects)."""
    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    args: Any = json.loads(c.function.arguments)
                except (ValueError, RecursionError):  # kept as the model wrote it
                    args = c.function.arguments
                calls.append({"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": args}})
            d["tool_calls"] = calls
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def template_supports_tools(tokenizer: ChatTemplateTokenizer) -> bool:
    """True when the tokenizer's chat template renders ``tools`` itself."""
    template = tokenizer.chat_template
    if isinstance(template, dict):  # named templates: the default or a "tool_use" one
        return "tool_use" in template or "tools" in str(template.get("default", ""))
    return isinstance(template, str) and "tools" in template


def render_prompt(
    tokenizer: ChatTemplateTokenizer,
    messages: Sequence[Message],
    tools: Sequence[ToolDefinition | dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for the next assistant turn (generation prompt included).

    With ``add_generation_prompt=False`` the conversation is rendered as history only (the RL
    trainer uses it to find where an assistant turn ends in the template's text).

    Tokenize it with ``add_special_tokens=False``: the template already wrote every special
    token, and a tokenizer that adds a BOS would otherwise double it.
    """
    if tools and template_supports_tools(tokenizer):
        tool_dicts = [_tool_dict(t) for t in tools]
        return tokenizer.apply_chat_template(
            _native_messages(messages), tools=tool_dicts, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    return tokenizer.apply_chat_template(
        to_template_messages(messages, tools), tokenize=False, add_generation_prompt=add_generation_prompt
    )


# --------------------------------------------------------------------------- parsing


class ParsedCompletion:
    """A completion split into ``content`` (``None`` when empty) and ``tool_calls``."""

    __slots__ = ("content", "tool_calls")

    def __init__(self, content: str | None, tool_calls: list[ToolCall]) -> None:
        self.content = content
        self.tool_calls = tool_calls

    def to_message(self) -> Message:
        """The assistant :class:`Message` (``tool_calls`` is ``None`` when there are none)."""
        return Message(role="assistant", content=self.content, tool_calls=self.tool_calls or None)

    def __repr__(self) -> str:
        return f"ParsedCompletion(content={self.content!r}, tool_calls={self.tool_calls!r})"


def new_tool_call_id() -> str:
    """A fresh OpenAI-style id, ``call_`` + 24 hex digits."""
    return "call_" + uuid.uuid4().hex[:24]


TOOL_CALL_CLOSE = "</tool_call>"
_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON|tool_call)?[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_NAME_RE = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS_RE = re.compile(r'"(?:arguments|parameters)"\s*:\s*(.*)', re.DOTALL)
_ARG_KEYS = ("arguments", "parameters")
_DECODER = json.JSONDecoder()


def _strip_fence(text: str) -> str:
    m = _FENCE_RE.search(text)
    return m.group(1).strip() if m and not text[: m.start()].strip() else text.strip()


def _call(name: str, arguments: Any) -> ToolCall:
    if isinstance(arguments, str):
        args_text = arguments  # already a JSON string (OpenAI style) or the model's broken text
    else:
        args_text = json.dumps({} if arguments is None else arguments, ensure_ascii=False)
    return ToolCall(id=new_tool_call_id(), function=FunctionCall(name=name, arguments=args_text))


def _as_call(obj: Any) -> ToolCall | None:
    """A decoded JSON value as a tool call, if it looks like one.

    ``{"name", "arguments"|"parameters"}`` and OpenAI's ``{"function": {...}}`` count; an object
    with a ``name`` and other keys is read as the name plus those keys as the arguments.
    """
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        return _as_call(obj["function"])
    if not isinstance(obj.get("name"), str):
        return None
    for key in _ARG_KEYS:
        if key in obj:
            return _call(obj["name"], obj[key])
    return _call(obj["name"], {k: v for k, v in obj.items() if k not in ("name", "type", "id")})


def _json_string(body: str) -> str:
    """The value of a JSON string literal's body; raw when it does not decode (bad escape)."""
    try:
        return json.loads(f'"{body}"', strict=False)  # strict=False: raw control characters are fine
    except ValueError:
        return body


def _salvage(text: str) -> ToolCall:
    """A call from text that is not valid JSON: the name if findable, the raw arguments."""
    name_m = _NAME_RE.search(text)
    name = _json_string(name_m.group(1)) if name_m else ""
    args_m = _ARGS_RE.search(text)
    if args_m:
        raw = args_m.group(1).strip()
        # drop the closing brace of the outer object (and what follows it, e.g. a stray quote)
        if raw.count("}") > raw.count("{") and raw.endswith("}"):
            raw = raw[:-1].rstrip()
        return _call(name, raw)
    return _call(name, text if not name_m else "{}")


def _call_blocks(text: str) -> list[tuple[int, int, str]]:
    """Every ``<tool_call>`` block of ``text``: (start, end, body). A block ends at the first
    ``</tool_call>`` (or the text's end) after the JSON its body opens with, so a string in the
    call may itself hold ``</tool_call>`` (a sampled model writes that; a grammar allows it); a
    body that is not JSON ends at the first ``</tool_call>``."""
    blocks: list[tuple[int, int, str]] = []
    pos = 0
    while (start := text.find(TOOL_CALL_OPEN, pos)) >= 0:
        body = start + len(TOOL_CALL_OPEN)
        search = body
        head = len(text) - len(text[body:].lstrip())
        if text.startswith(("{", "["), head):
            try:
                search = _DECODER.raw_decode(text, head)[1]
            except ValueError:
                pass
        close = text.find(TOOL_CALL_CLOSE, search)
        stop, pos = (len(text), len(text)) if close < 0 else (close, close + len(TOOL_CALL_CLOSE))
        blocks.append((start, pos, text[body:stop]))
    return blocks


def _calls_in_block(body: str) -> list[ToolCall]:
    """Every tool call in the body of one ``<tool_call>`` block; at least one."""
    text = _strip_fence(body)
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,[]":
            pos += 1
        if pos >= len(text):
            break
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except ValueError:
            calls.append(_salvage(text[pos:]))
            break
        items = obj if isinstance(obj, list) else [obj]
        for item in items:
            call = _as_call(item)
            calls.append(call if call is not None else _call("", json.dumps(item, ensure_ascii=False)))
        pos = end
    return calls or [_call("", text)]


def _bare_calls(text: str, tool_names: Iterable[str] | None) -> tuple[list[ToolCall], str]:
    """Tool calls written as bare (or fenced) JSON objects, and the text left around them."""
    allowed = set(tool_names) if tool_names is not None else None
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    search_text = text
    for fence in list(_FENCE_RE.finditer(text)):  # fenced JSON: unwrap, keep positions simple
        inner = fence.group(1).strip()
        if inner.startswith(("{", "[")):
            search_text = search_text.replace(fence.group(0), inner, 1)
    text = search_text
    while True:
        start = text.find("{", pos)
        if start < 0:
            break
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except ValueError:
            rest = text[start:]
            if re.match(r'\{\s*"name"\s*:', rest) and _ARGS_RE.search(rest):
                call = _salvage(rest)
                if allowed is None or call.function.name in allowed:
                    kept.append(text[pos:start])
                    calls.append(call)
                    pos = len(text)
                    break
            kept.append(text[pos : start + 1])
            pos = start + 1
            continue
        # without a tool list to check against, a bare object needs an explicit arguments key
        explicit = isinstance(obj, dict) and (any(k in obj for k in _ARG_KEYS) or "function" in obj)
        call = _as_call(obj) if explicit or allowed is not None else None
        if call is not None and (allowed is None or call.function.name in allowed):
            kept.append(text[pos:start])
            calls.append(call)
        else:
            kept.append(text[pos:end])
        pos = end
    kept.append(text[pos:])
    return calls, "".join(kept)


def parse_completion(text: str, tool_names: Iterable[str] | None = None) -> ParsedCompletion:
    """Split a completion into content and tool calls; never raises.

    ``<tool_call>`` blocks always count. Only when there are none is the text searched for bare
    or code-fenced JSON objects with ``name`` + ``arguments``/``parameters``; with
    ``tool_names`` given, such an object counts only if it names one of those tools (a model
    asked to print JSON should not call a tool by accident). ``arguments`` is always a string:
    the JSON re-encoded when it parsed, the raw text when it did not.
    """
    blocks = _call_blocks(text)
    if blocks:
        calls = [call for _, _, body in blocks for call in _calls_in_block(body)]
        kept, pos = [], 0
        for start, end, _ in blocks:
            kept.append(text[pos:start])
            pos = end
        content = "".join(kept) + text[pos:]
    else:
        calls, content = _bare_calls(text, tool_names)
    content = re.sub(r"\n{3,}", "\n\n", content).strip()
    if calls:
        content = re.sub(r"```(?:json)?\s*```", "", content).strip()
    return ParsedCompletion(content or None, calls)
