"""Policies: whatever chooses the agent's next message — a model, a task's reference, a trainer.

A policy is asked once per turn by the one agent loop (:mod:`agentrl_envs.agent`)::

    class Policy(Protocol):
        async def act(self, messages, tools) -> dict | None: ...

``messages`` is the conversation so far as wire dicts (the opening messages, then every
assistant message and the tool or user messages that answered it), ``tools`` the episode's tool
definitions. It returns the next assistant message (OpenAI shape: ``content`` and/or
``tool_calls``), or ``None`` to stop: the loop then cancels the session and scores the episode as
failed. A policy that cannot act because its prompt no longer fits raises
:class:`~agentrl_envs.errors.ContextLimitError` (scored ``agent context limit``); one whose model
server failed raises an :class:`~agentrl_envs.errors.InfrastructureError` (never scored).

A new policy object serves one episode, so a policy may keep state between turns (a reference
that remembers what it has read, a trainer policy that records its tokens).

A task's reference (``Task.reference_policy``) is a policy, or a plain list of calls
``[{"name": ..., "arguments": {...}}, ...]``, the trivial policy that sends them one per turn
(:class:`ScriptedPolicy`; :func:`as_policy` turns either into a policy).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .protocol.openai import function_call

__all__ = ["Policy", "ScriptedPolicy", "as_policy", "call_turn", "last_tool_output"]


@runtime_checkable
class Policy(Protocol):
    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The next assistant message, or ``None`` to stop the episode."""
        ...


_call_ids = itertools.count()


def call_turn(name: str, arguments: dict[str, Any] | None = None, *, content: str | None = None) -> dict[str, Any]:
    """An assistant message that makes one tool call (a fresh call id each time)."""
    call = function_call(f"call_{next(_call_ids):08d}", name, arguments or {})
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def last_tool_output(messages: list[dict[str, Any]]) -> str | None:
    """The content of the newest tool message (``None`` if the last turn got no tool reply)."""
    for m in reversed(messages):
        if m.get("role") == "assistant":
            return None
        if m.get("role") == "tool":
            content = m.get("content")
            return content if isinstance(content, str) else "".join(str(p.get("text", "")) for p in content or [])
    return None


class ScriptedPolicy:
    """Sends fixed calls one per turn, without looking at what comes back; stops when they run out."""

    def __init__(self, calls: Sequence[dict[str, Any]]) -> None:
        self.calls = list(calls)
        self._next = 0

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self._next >= len(self.calls):
            return None
        call = self.calls[self._next]
        self._next += 1
        return call_turn(call["name"], call.get("arguments", {}))


def as_policy(reference: Policy | Sequence[dict[str, Any]]) -> Policy:
    """A policy as it is; a list of calls as a :class:`ScriptedPolicy`."""
    if isinstance(reference, Policy):
        return reference
    if isinstance(reference, Sequence) and not isinstance(reference, str):
        return ScriptedPolicy(reference)
    raise TypeError(f"a reference must be a Policy or a list of calls, got {type(reference).__name__}")
