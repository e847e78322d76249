"""The two task hooks for harness-defined tasks (BFCL): ``on_assistant`` answers a whole assistant
message, ``session_tools`` gives per-session tools that may change mid-episode; a changed list
reaches the client with the step that changed it, in-process and through controller and worker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from stack_helpers import Stack

from agentrl_envs import TaskRuntime
from agentrl_envs.agent import AgentSession, InProcessSessions
from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.protocol.openai import Message
from agentrl_envs.task import Task


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": f"The {name} tool.", "parameters": {"type": "object", "properties": {}}},
    }


class Unlock(Task):
    """Sample ``{"key": K}``: the tool ``open`` appears once the model said ``K`` in text;
    calling it ends the episode with reward 1. Calls are answered by ``on_assistant``."""

    name = "unlock"
    max_turns = 6
    splits = ("dev",)

    @classmethod
    def load_samples(cls, split=None, data=None) -> list[dict[str, Any]]:
        return [{"key": "sesame"}]

    async def setup(self) -> list[dict[str, Any]]:
        self.unlocked = False
        return [{"role": "user", "content": "Say the key."}]

    def session_tools(self) -> list[dict[str, Any]]:
        return [_tool("look"), _tool("open")] if self.unlocked else [_tool("look")]

    async def on_assistant(self, messages: list[Message]) -> list[dict[str, Any]] | None:
        calls = [c for m in messages for c in (m.tool_calls or [])]
        if not calls:
            text = " ".join(m.text() for m in messages)
            self.unlocked = self.unlocked or self.sample["key"] in text
            return [{"role": "user", "content": "ok" if self.unlocked else "no"}]
        out = []
        for call in calls:
            if call.function.name == "open" and self.unlocked:
                self.finish(1.0)
            out.append({"role": "tool", "tool_call_id": call.id, "content": f"ran {call.function.name}"})
        return out


def _call(name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


async def _play(sessions: Any) -> AgentSession:
    session = AgentSession(sessions, "unlock", 0)
    t = await session.start()
    assert [x["function"]["name"] for x in t.tools] == ["look"]
    assert await session.act(_call("look")) == [{"role": "tool", "tool_call_id": "c1", "content": "ran look"}]
    assert [x["function"]["name"] for x in t.tools] == ["look"]  # unchanged: no tools in the step
    await session.act({"role": "assistant", "content": "the key is sesame"})
    assert [x["function"]["name"] for x in t.tools] == ["look", "open"]
    await session.act(_call("open"))
    assert t.finished and t.reward == 1.0
    return session


async def test_tools_change_in_process_and_on_assistant_answers():
    runtime = TaskRuntime(Unlock, split="dev")
    ep = runtime.episode(0)
    start = await ep.start()
    assert [x["function"]["name"] for x in start.tools] == ["look"]
    out = await ep.step([_call("look")])
    assert out.tools is None and out.messages[0]["content"] == "ran look" and out.metric["turns"] == 1
    out = await ep.step([{"role": "assistant", "content": "sesame"}])
    assert [x["function"]["name"] for x in out.tools] == ["look", "open"]
    await ep.close()
    await _play(InProcessSessions(runtime))


@pytest.mark.slow
async def test_tools_change_through_controller_and_worker():
    stack = Stack()
    try:
        stack.add_worker(Unlock)
        async with AsyncControllerClient(stack.url) as client:
            await _play(client)
    finally:
        stack.close()


async def test_on_assistant_failure_is_a_task_error():
    class Broken(Unlock):
        async def on_assistant(self, messages):
            raise RuntimeError(json.dumps("boom"))

    ep = TaskRuntime(Broken, split="dev").episode(0)
    await ep.start()
    out = await ep.step([_call("look")])
    assert out.finish and out.status.value == "task error" and "boom" in out.metric["error"]
