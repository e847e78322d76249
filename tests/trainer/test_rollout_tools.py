"""A token trajectory keeps one tool list per episode: a session whose tools change mid-episode
(bfcl's multi_turn_miss_func adds functions at a later turn) is refused with a clear error, never
played on with the first list's prompt and grammar."""

from __future__ import annotations

import asyncio

import pytest

from agentrl_envs.protocol.openai import ToolDefinition
from agentrl_trainer.rollout import RolloutSettings, TokenPolicy


def tool(name: str) -> dict:
    return {
        "type": "function",
        "function": {"name": name, "description": name, "parameters": {"type": "object", "properties": {}}},
    }


def test_tools_that_change_within_an_episode_are_refused() -> None:
    policy = TokenPolicy(lambda _turn: None, tokenizer=None, stop_token_ids=[0], settings=RolloutSettings())
    policy._tools = [ToolDefinition.model_validate(tool("ls"))]  # as after the first turn
    policy.trajectory = object()  # type: ignore[assignment]
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="tools changed within the episode"):
        asyncio.run(policy.act(messages, [tool("ls"), tool("cd")]))
    with pytest.raises(AttributeError, match="next_prompt"):  # the same list goes on, to the prompt (a stand-in here)
        asyncio.run(policy.act(messages, [tool("ls")]))
