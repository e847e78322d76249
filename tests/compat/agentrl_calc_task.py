"""A task written the way AgentRL's own examples write one (its simple-calculator), against
AgentRL's SDK (agentrl-worker on PyPI) and served by its TaskWorker.

Run as: python agentrl_calc_task.py CONTROLLER_API_URL PORT [--name NAME] [--samples N] [--broken WHAT]

As the example: a sample asks for a + b or a - b; the model calls ``add`` / ``subtract`` and
answers with ``submit`` (reward 1 if right, else 0); a round **without a tool call ends the
episode** ``agent validation failed``; an unknown tool or bad arguments get a tool message; after
``MAX_ROUNDS`` rounds the episode ends ``task limit reached``. The tools' arguments have no
descriptions and the worker offers no reference solutions, as in the example.

``--broken`` makes it break one rule of the protocol, on purpose (tests/compat/test_conform_agentrl.py):

* ``keeps-cancelled``: the task is written synchronously (``sync_start_sample``) and does not
  catch ``AgentCancelledException``; AgentRL's worker then never releases a cancelled session
  (its cancel fails inside and the session stays in its map);
* ``answers-ended``: the worker answers a step of a session its task has ended with 200 (the
  session's last answer again) instead of refusing it;
* ``reads-value-errors``: the task catches only ``ValueError`` (``json.loads``' documented errors)
  around the arguments, so arguments nested past Python's recursion limit raise
  ``RecursionError`` out of the task and end the episode ``task error`` for the model's mistake.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentrl.worker.task import Session, Task
from agentrl.worker.task_worker import TaskWorker
from agentrl.worker.typings import (
    AgentCancelledException,
    InteractRequest,
    RewardHistoryItem,
    SampleStatus,
    TaskSampleExecutionResult,
)

MAX_ROUNDS = 5


def _function(name: str, description: str, **properties: str) -> dict[str, Any]:
    """An OpenAI function tool whose arguments (all required) have a type and no description."""
    schema = {"type": "object", "properties": {p: {"type": t} for p, t in properties.items()}, "required": list(properties)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = [
    _function("add", "Add two numbers.", a="number", b="number"),
    _function("subtract", "Subtract the second number from the first.", a="number", b="number"),
    _function("submit", "Submit the final answer; this ends the episode.", result="number"),
]


class CalcTask(Task):
    #: What a call's arguments that cannot be read raise (read as no arguments).
    unreadable: tuple[type[Exception], ...] = (ValueError, RecursionError)

    def __init__(self, name: str, samples: int, full_async: bool = True) -> None:
        super().__init__(name=name, concurrency=3, tools=TOOLS, full_async=full_async)
        self.samples = [{"a": i, "b": 2 * i, "op": "+" if i % 2 else "-"} for i in range(1, samples + 1)]

    def get_indices(self) -> list[int]:
        return list(range(len(self.samples)))

    def _opening(self, index: int, session: Session) -> dict[str, Any]:
        sample = self.samples[index]
        session.inject({"role": "system", "content": "Use the tools to calculate; answer with submit."})
        session.inject({"role": "user", "content": f"What is {sample['a']} {sample['op']} {sample['b']}?"})
        return sample

    def _answer(self, sample: dict[str, Any], call: dict[str, Any], session: Session) -> TaskSampleExecutionResult | None:
        """Play one tool call: inject its answer; the episode's result if it ended it."""
        name = call.get("function", {}).get("name")
        try:
            args = json.loads(call.get("function", {}).get("arguments") or "{}")
        except self.unreadable:
            args = {}
        if name == "submit":
            right = sample["a"] + sample["b"] if sample["op"] == "+" else sample["a"] - sample["b"]
            session.inject({"role": "tool", "tool_call_id": call.get("id"), "content": "Submitted."})
            session.inject(RewardHistoryItem(reward=float(args.get("result") == right)))
            return TaskSampleExecutionResult(status=SampleStatus.COMPLETED)
        if name in ("add", "subtract"):
            a, b = args.get("a"), args.get("b")
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                content = str(a + b if name == "add" else a - b)
            else:
                content = "Invalid arguments: a and b must be numbers."
        else:
            content = f"Unknown function: {name}"
        session.inject({"role": "tool", "tool_call_id": call.get("id"), "content": content})
        return None

    def _round(self, sample: dict[str, Any], response: Any, session: Session) -> TaskSampleExecutionResult | None:
        """Play the model's message: no tool call ends the episode, as in the example."""
        calls = response.messages[0].get("tool_calls") or []
        if not calls:
            return TaskSampleExecutionResult(status=SampleStatus.AGENT_VALIDATION_FAILED)
        return next((r for call in calls if (r := self._answer(sample, call, session)) is not None), None)

    async def start_sample(self, index: int, session: Session) -> TaskSampleExecutionResult:
        sample = self._opening(index, session)
        try:
            for _ in range(MAX_ROUNDS):
                if result := self._round(sample, await session.action(), session):
                    return result
            return TaskSampleExecutionResult(status=SampleStatus.TASK_LIMIT_REACHED)
        except AgentCancelledException:
            return TaskSampleExecutionResult(status=SampleStatus.CANCELLED)


class KeepsCancelled(CalcTask):
    """The same task written synchronously, without catching AgentCancelledException."""

    start_sample = Task.start_sample  # AgentRL's: runs sync_start_sample in a thread

    def __init__(self, name: str, samples: int) -> None:
        super().__init__(name, samples, full_async=False)

    def sync_start_sample(self, index: int, session: Session) -> TaskSampleExecutionResult:
        sample = self._opening(index, session)
        for _ in range(MAX_ROUNDS):
            if result := self._round(sample, session.sync_action(), session):
                return result
        return TaskSampleExecutionResult(status=SampleStatus.TASK_LIMIT_REACHED)


class ReadsValueErrors(CalcTask):
    """The same task catching only ``ValueError`` around the arguments."""

    unreadable = (ValueError,)


class AnswersEnded(TaskWorker):
    """A worker that keeps each ended session's last answer and sends it again, 200, to a later step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended: dict[int, Any] = {}

    async def interact(self, parameters: InteractRequest) -> Any:
        if parameters.session_id in self.ended:
            return self.ended[parameters.session_id]
        answer = await super().interact(parameters)
        if answer["env_out"]["finish"]:
            self.ended[parameters.session_id] = answer
        return answer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("controller")
    p.add_argument("port", type=int)
    p.add_argument("--name", default="agentrl-calc")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--broken", choices=["keeps-cancelled", "answers-ended", "reads-value-errors"])
    a = p.parse_args()
    task_cls = {"keeps-cancelled": KeepsCancelled, "reads-value-errors": ReadsValueErrors}.get(a.broken, CalcTask)
    task = task_cls(a.name, a.samples)
    worker_cls = AnswersEnded if a.broken == "answers-ended" else TaskWorker
    worker = worker_cls(task, controller_address=a.controller, self_address=f"http://127.0.0.1:{a.port}/api", heart_rate=1)
    worker.run("127.0.0.1", a.port)


if __name__ == "__main__":
    main()
