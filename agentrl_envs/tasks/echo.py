"""``echo``: a trivial task whose only tool echoes its argument. For load tests and examples.

Each sample asks the model to echo a word; echoing it ends the episode with reward 1, echoing
anything else returns the text and goes on. Its turn limit is high so load tests can run long
sessions (``--option max_turns=N`` is not needed: the benchmark never finishes a session).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..task import Task, tool

WORDS = ("apple", "river", "stone", "cloud", "ember", "maple", "quartz", "harbor")


class EchoTask(Task):
    name = "echo"
    max_turns = 1_000_000
    splits = ("dev",)
    concurrency = 4096

    @classmethod
    def load_samples(cls, split: str | None = None, data: str | Path | None = None) -> list[dict[str, Any]]:
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
        if text == self.sample["word"]:
            self.finish(1.0)
        return text
