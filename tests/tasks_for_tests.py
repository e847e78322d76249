"""Small tasks used only by the tests (not registered as entry points)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agentrl_envs.task import Task, tool


class Calc(Task):
    """Add two numbers; answering right ends the episode with reward 1."""

    name = "calc"
    max_turns = 8
    splits = ("dev",)
    concurrency = 2
    teardowns: list[int] = []

    @classmethod
    def load_samples(cls, split=None, data=None) -> list[dict[str, Any]]:
        return [{"a": 2, "b": 3}, {"a": 10, "b": -4}]

    @classmethod
    def reference_policy(cls, sample):
        return [{"name": "answer", "arguments": {"value": sample["a"] + sample["b"]}}]

    async def setup(self):
        return [{"role": "user", "content": f"What is {self.sample['a']} + {self.sample['b']}?"}]

    async def teardown(self) -> None:
        Calc.teardowns.append(id(self))

    @tool
    def add(self, x: int, y: int = 0) -> str:
        """Add two integers.

        Args:
            x: The first addend.
            y: The second addend.
        """
        self.last_thread = threading.current_thread().name
        return str(x + y)

    @tool
    async def answer(self, value: int) -> str:
        """Give the final answer.

        Args:
            value: The sum.
        """
        self.finish(1.0 if value == self.sample["a"] + self.sample["b"] else 0.0)
        return "answer recorded"

    @tool
    async def nap(self, seconds: float) -> str:
        """Sleep (used to hold a step open).

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return "awake"

    @tool
    def explode(self) -> str:
        """A tool with a bug in it."""
        raise RuntimeError("boom")


def call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }
