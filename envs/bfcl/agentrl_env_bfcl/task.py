"""``bfcl``: the Berkeley Function Calling Leaderboard (BFCL), scored by BFCL's own checkers.

One split per supported category (:mod:`.categories`). A multi-turn entry is played as BFCL's
runner plays it (:mod:`.multi_turn`): its user turns one after another, BFCL's classes executing
the calls, the held-back functions of ``miss_func`` added at their turn (the step that adds them
carries the new tool list), reward 1 when BFCL's multi-turn checker accepts the whole entry. A
single-turn entry is one assistant message, scored by BFCL's AST checker (``irrelevance``: valid
when it calls no function). The tools are the entry's function docs as BFCL's OpenAI handler
sends them. Every sample's metrics carry its category, group and the group's leaderboard weight
(``category``, ``category_group``, ``category_weight``), which the eval report groups by.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentrl_envs.protocol.agentrl import SampleStatus
from agentrl_envs.protocol.openai import Message
from agentrl_envs.task import Task

from . import upstream
from .categories import COLLECTIONS, SUPPORTED, is_multi_turn, metrics
from .multi_turn import MultiTurnRun, Verdict
from .reference import MessagesPolicy, reference_messages
from .samples import load_file, load_split, make_sample


class BFCLTask(Task):
    name = "bfcl"
    #: A sample's own ``max_turns`` (see :mod:`.samples`) is its limit; this is the fallback.
    max_turns = 21
    #: One split per category, then the collections of several (interleaved).
    splits = (*SUPPORTED, *COLLECTIONS)
    concurrency = 32

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)  # a category or a collection (default: multi_turn_base)
    load_data = staticmethod(load_file)  # a JSON-lines file of samples

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        """``{"entry": {...}, "ground_truth": ...}``: a BFCL entry as ``load_dataset_entry`` gives it."""
        return make_sample(custom_task["entry"], custom_task.get("ground_truth"))

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]) -> Any:
        """The ground truth as tool calls: per turn one message with its calls, then text to end it."""
        return MessagesPolicy(reference_messages(sample))

    # ------------------------------------------------------------------ session

    def __init__(self, sample: dict[str, Any], *, config: Any = None, resources: Any = None) -> None:
        super().__init__(sample, config=config, resources=resources)
        self.metrics.update(metrics(sample["category"]))
        self.run: MultiTurnRun | None = None
        self._tools: list[dict[str, Any]] = []

    async def setup(self) -> list[dict[str, Any]]:
        entry = self.sample["entry"]
        if not is_multi_turn(self.sample["category"]):
            self._tools = upstream.compile_tools(entry["function"])
            return [dict(m) for m in entry["question"][0]]
        self.run = MultiTurnRun(entry, self.sample["ground_truth"])
        opening = await asyncio.to_thread(self.run.start)  # BFCL's classes load their scenario
        self._tools = self.run.tools
        return opening

    async def teardown(self) -> None:
        if self.run is not None:
            self.run.release()

    def session_tools(self) -> list[dict[str, Any]]:
        return self._tools

    async def on_assistant(self, messages: list[Message]) -> list[dict[str, Any]]:
        message = _merged(messages)
        if self.run is None:
            result = await asyncio.to_thread(
                upstream.evaluate_single_turn,
                self.sample["entry"],
                self.sample["ground_truth"],
                upstream.model_responses(message),
            )
            self._end(Verdict.of(result))
            return []
        run = self.run
        out = await asyncio.to_thread(run.step, message)
        self._tools = run.tools
        self.metrics["tool_errors"] = run.errors  # the SDK counts only the calls it dispatches
        if run.verdict is not None:
            self._end(run.verdict)
        return out

    def _end(self, verdict: Verdict) -> None:
        # A force quit fails the entry unless it came in the last turn and BFCL still accepts it.
        status = SampleStatus.TASK_LIMIT_REACHED if verdict.force_quit and not verdict.valid else SampleStatus.COMPLETED
        extra = {"bfcl_error_type": verdict.error_type, "bfcl_error": verdict.error} if not verdict.valid else {}
        self.finish(1.0 if verdict.valid else 0.0, status=status, bfcl_valid=verdict.valid, **extra)


def _merged(messages: list[Message]) -> dict[str, Any]:
    """The step's assistant message(s) as one wire dict (the protocol sends one): every tool
    call, and the text (``None`` when there is none, as the OpenAI API reports it)."""
    calls = [c.model_dump(mode="json", exclude_none=True) for m in messages for c in m.tool_calls or []]
    text = "".join(m.text() for m in messages)
    content = text if text or any(m.content is not None for m in messages) else None
    return {"role": "assistant", "content": content, "tool_calls": calls}
