"""Helpers for the DB tests: drive episodes through agentrl_envs' runtime, as a worker would."""

from __future__ import annotations

import json
from typing import Any

from agentrl_envs import Episode, TaskRuntime


def call(name: str, i: int = 0, **arguments: Any) -> dict[str, Any]:
    """An assistant message with one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


async def sql(episode: Episode, query: str) -> str:
    out = await episode.step([call("execute_sql", query=query)])
    return out.messages[0]["content"]


async def replay(runtime: TaskRuntime, index: int) -> float:
    """Replay the reference solution of sample ``index``; return the final reward."""
    episode = runtime.episode(index)
    await episode.start()
    out = None
    for i, step in enumerate(runtime.task_cls.reference_solution(runtime.samples[index])):
        out = await episode.step([call(step["name"], i, **step["arguments"])])
    assert out is not None and out.finish, f"sample {index}: the episode did not finish"
    return out.reward
