"""Constrained decoding of tool calls with xgrammar (the grammar engine vLLM uses).

A turn sampled under :class:`ToolCallGrammar` is exactly one Hermes-style call to one of the
offered tools, in the format :func:`.toolcalls.parse_completion` reads and the prompt shows::

    <tool_call>
    {"name": "<one of the tools>", "arguments": <JSON that fits that tool's parameters>}
    </tool_call><stop>

The arguments follow the tool's JSON schema (required keys, types, no extra keys), so a small
model can no longer invent tool names or write broken JSON; *what* it calls and with which
values is still its own choice. This is the transformers counterpart of OpenAI's
``tool_choice="required"`` as structured-output engines implement it.

Grammars are compiled once per tool set (cached by the tools' JSON) for one tokenizer;
:meth:`ToolCallGrammar.matcher` returns a fresh per-sequence matcher that the sampling loop
feeds token by token (see :meth:`.engine.TransformersEngine.generate_batch`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from ..protocol.openai import ToolDefinition
from .toolcalls import _tool_dict

__all__ = ["ToolCallGrammar", "tool_call_schema"]

CALL_OPEN = "<tool_call>\n"
CALL_CLOSE = "\n</tool_call>"
#: what :meth:`ToolCallGrammar.closing_tokens` tries, in order, where the grammar allows more than
#: one continuation: end a string, an object, an array, then the shortest value of each JSON type
_CLOSERS = ('"', "}", "]", "0", "false", "null")


def tool_call_schema(tools: Sequence[ToolDefinition | dict[str, Any]]) -> dict[str, Any]:
    """JSON schema of one call: ``{"name": <const>, "arguments": <that tool's parameters>}``
    for any of ``tools`` (``anyOf``; ``name`` first, as the prompt's example writes it)."""
    if not tools:
        raise ValueError("a tool-call grammar needs at least one tool")
    options = []
    for tool in tools:
        fn = _tool_dict(tool)["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


class ToolCallGrammar:
    """Compiled tool-call grammars for one tokenizer (thread-safe, cached per tool set).

    ``vocab_size``: the model's logits width (may exceed ``len(tokenizer)``);
    ``stop_token_ids``: the ids that end a turn (accepted once the call is complete).
    Raises ``ImportError`` with the install hint when xgrammar is missing.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        try:
            import xgrammar as xgr
        except ImportError as e:  # pragma: no cover - xgrammar is part of the [local] extra
            raise ImportError("constrained tool calls need xgrammar: pip install 'agentrl-envs[local]'") from e
        self._xgr = xgr
        self._tokenizer = tokenizer
        self.vocab_size = int(vocab_size)
        self.stop_token_ids = sorted(stop_token_ids)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size, stop_token_ids=sorted(stop_token_ids))
        # the tokens of one UTF-8 continuation byte: they finish a character split across tokens
        self._continuation_ids = [i for i, b in enumerate(info.decoded_vocab) if len(b) == 1 and 0x80 <= b[0] <= 0xBF]
        self._compiler = xgr.GrammarCompiler(info)
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def compiled(self, tools: Sequence[ToolDefinition | dict[str, Any]], required: bool = True) -> Any:
        """The compiled grammar (an ``xgrammar.CompiledGrammar``) of a turn with ``tools``.

        ``required``: exactly one call to one of ``tools`` (``tool_choice`` ``required`` or named).
        Otherwise (``auto``): any text, but once ``<tool_call>`` is written, a call that fits one
        of the tools must follow and be closed (an xgrammar structural tag), so a call is always
        well-formed when one is made; several calls and text between them stay possible.
        """
        schema = tool_call_schema(tools)
        key = json.dumps([schema, required], sort_keys=True)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        xgr = self._xgr
        if required:
            # properties are generated in schema order (name before arguments), so not the sorted key
            body = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, separators=(", ", ": "))
            grammar = xgr.Grammar.concat(
                xgr.Grammar.from_ebnf(f"root ::= {json.dumps(CALL_OPEN)}"),
                body,
                xgr.Grammar.from_ebnf(f"root ::= {json.dumps(CALL_CLOSE)}"),
            )
        else:
            tag = {
                "type": "tag",
                "begin": CALL_OPEN,
                "content": {"type": "json_schema", "json_schema": schema},
                "end": CALL_CLOSE,
            }
            structural = {
                "type": "structural_tag",
                "format": {
                    "type": "triggered_tags",
                    "triggers": [CALL_OPEN.strip()],
                    "tags": [tag],
                    "at_least_one": False,
                    "stop_after_first": False,
                },
            }
            grammar = xgr.Grammar.from_structural_tag(json.dumps(structural))
        compiled = self._compiler.compile_grammar(grammar)
        with self._lock:
            return self._cache.setdefault(key, compiled)

    def matcher(self, tools: Sequence[ToolDefinition | dict[str, Any]], required: bool = True) -> Any:
        """A fresh ``xgrammar.GrammarMatcher`` for one sequence (see :meth:`compiled`)."""
        return self._xgr.GrammarMatcher(self.compiled(tools, required))

    def closing_tokens(self, matcher: Any, max_chars: int = 256) -> list[int] | None:
        """The token ids that complete what ``matcher`` has accepted, the turn's stop token
        excluded (the grammar accepts one right after them); ``None`` when no completion is found.

        A completion is built from the grammar's forced continuations (``find_jump_forward_string``:
        the rest of a call once its arguments are closed, a required key still missing) and, where
        several continuations are allowed, the first of :data:`_CLOSERS` the grammar accepts: so an
        open string is ended, then its object, and a missing value becomes ``""``, ``0``,
        ``false`` or ``null``; a character whose first bytes were sampled is first finished with
        continuation bytes (some character: the grammar takes no quote inside one). ``matcher``
        itself is not changed. Used to end a call within its
        token budget (:attr:`.decode.DecodeRow.close_in_budget`).
        """
        m = matcher.fork()
        head: list[int] = []  # continuation bytes that end a character the sampled tokens split
        while len(head) < 3 and not self._may_stop(m) and not m.find_jump_forward_string():
            if any(m.fork().accept_string(c) for c in _CLOSERS):
                break
            byte = next((t for t in self._continuation_ids if m.fork().accept_token(t)), None)
            if byte is None:
                break
            m.accept_token(byte)
            head.append(byte)
        text = ""
        while len(text) <= max_chars:
            if self._may_stop(m):
                break
            step = m.find_jump_forward_string()
            if step:
                m.accept_string(step)
            else:
                for closer in _CLOSERS:
                    probe = m.fork()
                    if probe.accept_string(closer):
                        m, step = probe, closer
                        break
                else:
                    return None
            text += step
        else:
            return None
        ids = head + (list(self._tokenizer.encode(text, add_special_tokens=False)) if text else [])
        check = matcher.fork()  # the text's own tokenization must be accepted token by token
        if not all(check.accept_token(t) for t in ids) or not self._may_stop(check):
            return None
        return ids

    def _may_stop(self, matcher: Any) -> bool:
        """Whether ``matcher`` accepts one of the stop tokens now (tried on a copy)."""
        return any(matcher.fork().accept_token(s) for s in self.stop_token_ids)

    def allocate_bitmask(self, rows: int) -> Any:
        """A token bitmask for ``rows`` sequences (fill it with ``matcher.fill_next_token_bitmask``)."""
        return self._xgr.allocate_token_bitmask(rows, self.vocab_size)

    def apply_bitmask(self, logits: Any, bitmask: Any, indices: Sequence[int]) -> None:
        """Set to -inf, in place, the logits of the tokens the grammar forbids, in rows ``indices``."""
        self._xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), indices=list(indices))
