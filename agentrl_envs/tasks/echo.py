"""``echo``: a trivial task whose only tool echoes its argument. For load tests and examples.

Each sample asks the model to echo a word; echoing it ends the episode with reward 1, echoing
anything else returns the text and goes on. Its turn limit is high so load tests can run long
sessions.

For load generators (echo-K): ``--option steps=K`` ends every episode with reward 1 at its K-th
echo whatever it echoes, and ``--split load`` has 100 samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..task import Task, tool

WORDS = ("apple", "river", "stone", "cloud", "ember", "maple", "quartz", "harbor")


class EchoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: int | None = Field(None, ge=1, description="end each episode with reward 1 at this many echoes (echo-K)")


class EchoTask(Task):
    name = "echo"
    max_turns = 1_000_000
    splits = ("dev", "load")
    concurrency = 4096
    Config = EchoConfig

    @classmethod
    def load_samples(cls, split: str | None = None, data: str | Path | None = None) -> list[dict[str, Any]]:
        if split == "load":
            return [{"word": f"{WORDS[i % len(WORDS)]}-{i}"} for i in range(100)]
        return [{"word": w} for w in WORDS]

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"name": "echo", "arguments": {"text": sample["word"]}}]

    async def setup(self) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": "You are a helpful agent. Act only through the tools."},
            {"role": "user", "content": f"Echo the word {self.sample['word']!r}."},
        ]

    @tool
    async def echo(self, text: str) -> str:
        """Echo a text back.

        Args:
            text: The text to echo.
        """
        self.echoes = getattr(self, "echoes", 0) + 1
        if text == self.sample["word"] or self.echoes == self.config.steps:
            self.finish(1.0)
        return text
