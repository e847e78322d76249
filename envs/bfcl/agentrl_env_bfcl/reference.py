"""The reference policy: BFCL's ground truth sent as tool calls.

Multi-turn: per user turn, one assistant message with the turn's ground-truth calls (skipped
when the turn expects none), then a text message, which ends the turn as in BFCL's runner.
A ground-truth call is a Python call string (``sort('final_report.pdf')``); its positional
arguments take their names from the BFCL class method it calls. Single-turn: one message with a
call per ground-truth function (dots in names as ``_``, as the tools name them), each parameter
at its first possible value, parameters whose possible values include ``""`` (optional) left
out; ``irrelevance``: a text answer.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
from collections.abc import Sequence
from typing import Any

from agentrl_envs.protocol.openai import function_call

from .categories import is_multi_turn
from .upstream import bfcl

END_OF_TURN = "Done."
_ids = itertools.count()


class MessagesPolicy:
    """Sends fixed assistant messages in order, without looking at what comes back; then stops."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self.messages = list(messages)
        self._next = 0

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self._next >= len(self.messages):
            return None
        self._next += 1
        return self.messages[self._next - 1]


def calls_message(calls: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """An assistant message making ``calls`` ((name, arguments) pairs) in parallel."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [function_call(f"call_{next(_ids):08d}", name, args) for name, args in calls],
    }


def text_message(text: str = END_OF_TURN) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def reference_messages(sample: dict[str, Any]) -> list[dict[str, Any]]:
    if is_multi_turn(sample["category"]):
        methods = _methods(sample["entry"]["involved_classes"])
        out = []
        for turn in sample["ground_truth"]:
            if turn:
                out.append(calls_message([parse_call(c, methods) for c in turn]))
            out.append(text_message())
        return out
    if sample["ground_truth"] is None:  # irrelevance
        return [text_message("None of the functions can answer this.")]
    docs = {f["name"]: f for f in sample["entry"]["function"]}
    calls = []
    for answer in sample["ground_truth"]:
        for name, params in answer.items():
            required = set(docs[name]["parameters"].get("required", []))
            args = {p: _chosen(values) for p, values in params.items() if p in required or "" not in values}
            calls.append((name.replace(".", "_"), args))
    return [calls_message(calls)]


def _chosen(values: list[Any]) -> Any:
    """The first possible value that is not ``""``; inside a dict value, each key's possible
    values are a list again (keys that may be left out, with ``""`` among them, are)."""
    value = next(v for v in values if v != "")
    return _literal(value)


def _literal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _chosen(vs) for k, vs in value.items() if "" not in vs}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def _methods(classes: list[str]) -> dict[str, inspect.Signature]:
    """Every public method of the entry's BFCL classes, by name, with its signature."""
    mapping = bfcl().multi_turn_utils.CLASS_FILE_PATH_MAPPING
    methods = {}
    for class_name in classes:
        cls = getattr(importlib.import_module(mapping[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                methods[name] = inspect.signature(fn)
    return methods


def parse_call(call: str, methods: dict[str, inspect.Signature]) -> tuple[str, dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` → ``("mv", {"source": "a", "destination": "b"})``."""
    node = ast.parse(call, mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"not a call of a named function: {call!r}")
    name = node.func.id
    params = [p for p in methods[name].parameters if p != "self"]
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return name, args
