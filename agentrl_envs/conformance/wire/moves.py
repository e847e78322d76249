"""The rounds the checks play, and which of them keep a session open.

A check that needs a session still open after a round cannot assume that a round without a tool
call keeps it open: in AgentRL's own tasks (its simple-calculator example, AgentBench-FC's
ALFWorld) such a round ends the episode ``agent validation failed``. The moves a check may play
are, in this order (:func:`moves`):

* a round without a tool call (:data:`~agentrl_envs.conformance.common.NO_CALL`);
* a call of each tool the worker advertises, with the least arguments its schema asks for
  (:func:`example_arguments`).

:func:`keep_open` finds, once per run, the first move that leaves a fresh session running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..common import NO_CALL, shorten
from .target import Answer, WireTarget


@dataclass(frozen=True)
class Move:
    """One assistant message a check sends: no tool call (``tool`` None), or one call of ``tool``."""

    tool: str | None = None
    arguments: str = ""

    @property
    def what(self) -> str:
        """How a failure message names the round: ``without a tool call``, ``calling add({"a": 0})``."""
        return "without a tool call" if self.tool is None else f"calling {self.tool}({self.arguments})"

    def call_id(self, turn: int) -> str:
        return f"conform_{turn}"

    def message(self, turn: int) -> dict[str, Any]:
        """The assistant message of round ``turn`` (a call's id names the round)."""
        if self.tool is None:
            return dict(NO_CALL)
        call = {"id": self.call_id(turn), "type": "function", "function": {"name": self.tool, "arguments": self.arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}


NO_CALL_MOVE = Move()


def example_value(schema: Any) -> Any:
    """The simplest value a JSON Schema accepts: its ``const``, first ``enum`` value, ``default``
    or first example, else its type's zero (``""``, ``0``, ``False``, ``[]``, an object of its
    required properties, ``None``)."""
    if not isinstance(schema, dict):
        return None
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema[key][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_value(schema[key][0])
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" or (kind is None and "properties" in schema):
        return example_arguments(schema)
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        if isinstance(schema.get("exclusiveMinimum"), (int, float)):
            low = schema["exclusiveMinimum"] + 1
        return low if isinstance(low, (int, float)) and low > 0 else 0
    zero = {"string": "a" * int(schema.get("minLength", 0)), "boolean": False, "array": [], "null": None}
    return zero.get(kind, "")


def example_arguments(parameters: Any) -> dict[str, Any]:
    """The least arguments an object schema asks for: each required property at its :func:`example_value`."""
    if not isinstance(parameters, dict):
        return {}
    props = parameters.get("properties") if isinstance(parameters.get("properties"), dict) else {}
    return {name: example_value(props.get(name)) for name in parameters.get("required") or [] if isinstance(name, str)}


def moves(tools: list[Any]) -> list[Move]:
    """The moves for a worker advertising ``tools``: no tool call first, then each tool once."""
    calls = [
        Move(t["function"]["name"], json.dumps(example_arguments(t["function"].get("parameters"))))
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    ]
    return [NO_CALL_MOVE, *calls]


def ended(body: dict[str, Any]) -> str:
    """How an answer ended its episode, for a message: status, reward and the error if any."""
    metrics = body.get("metrics")
    why = metrics.get("error") if isinstance(metrics, dict) else None
    return f"status {body.get('status')!r}, reward {body.get('reward')}" + (f", error: {shorten(why)}" if why else "")


def env_out(a: Answer, where: str) -> dict[str, Any]:
    """The body of a step's answer, which must be 200 with ``finish``, ``status``, ``messages``."""
    body = a.body if isinstance(a.body, dict) else {}
    assert a.ok and isinstance(body.get("messages"), list) and "finish" in body and "status" in body, (
        f"{where}: expected an answer ({{finish, reward, status, messages, metrics}}), got {a.what()}"
    )
    return body


@dataclass
class KeepOpen:
    """What :func:`keep_open` found: the move (None when every move ended the episode at once) and
    how each move tried before it ended its session."""

    move: Move | None
    tried: list[str]

    def why_none(self) -> str:
        return "every move this check can play ends the episode in its first round (" + "; ".join(self.tried) + ")"


def keep_open(t: WireTarget) -> KeepOpen:
    """The first of :func:`moves` that leaves a fresh session of the first sample running after
    one round, each tried on a session of its own; learned once per run (``t.learned``)."""
    if "keep_open" not in t.learned:
        index = t.first_index()
        candidates: list[Move] | None = None
        tried: list[str] = []
        found: Move | None = None
        while found is None and (candidates is None or len(tried) < len(candidates)):
            with t.session(index) as (sid, first):
                candidates = candidates if candidates is not None else moves(first.get("tools") or [])
                move = candidates[len(tried)]
                a = t.interact(sid, move.message(1))
                body = a.body if a.ok and isinstance(a.body, dict) else None
                if body is not None and body.get("finish") is False:
                    found = move
                else:
                    tried.append(f"{move.what}: " + (ended(body) if body is not None else a.what()))
        t.learned["keep_open"] = KeepOpen(found, tried)
    return t.learned["keep_open"]
