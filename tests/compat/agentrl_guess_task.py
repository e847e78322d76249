"""A task written against AgentRL's own SDK (agentrl-worker on PyPI), served by its TaskWorker,
for the wire-level conformance suite (tests/compat/test_conform_agentrl.py).

Run as: python agentrl_guess_task.py CONTROLLER_API_URL PORT [--idle-timeout S] [--broken leaks-idle]

The model guesses a number with ``guess(n)``; the right one completes with reward 1, a wrong one
is answered and the game goes on; a round **without a tool call gets a user reminder and the
episode goes on**; after ``MAX_ROUNDS`` rounds it ends ``task limit reached``. Two sessions at
most (the capacity check fills them).

``--idle-timeout S``: the task drops a session that waits for the model longer than S seconds
(it ends ``cancelled``), as a task that guards its own resources does (AgentRL's worker has no
idle timeout of its own). ``--broken leaks-idle`` breaks that on purpose: the timeout applies
only once the model has played a round, so a session never stepped is never dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from agentrl.worker.task import Session, Task
from agentrl.worker.task_worker import TaskWorker
from agentrl.worker.typings import AgentCancelledException, RewardHistoryItem, SampleStatus, TaskSampleExecutionResult

MAX_ROUNDS = 6

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the secret number.",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer", "description": "Your guess."}},
                "required": ["n"],
            },
        },
    }
]


class GuessTask(Task):
    def __init__(self, idle_timeout: float | None = None, leaks_idle: bool = False) -> None:
        super().__init__(name="agentrl-guess", concurrency=2, tools=TOOLS, full_async=True)
        self.idle_timeout = idle_timeout
        self.leaks_idle = leaks_idle

    def get_indices(self) -> list[int]:
        return [0, 1, 2]

    async def _action(self, session: Session, rounds: int) -> Any:
        if self.idle_timeout is None or (self.leaks_idle and rounds == 0):
            return await session.action()
        return await asyncio.wait_for(session.action(), self.idle_timeout)

    async def start_sample(self, index: int, session: Session) -> TaskSampleExecutionResult:
        session.inject({"role": "user", "content": "Guess my number between 0 and 9."})
        try:
            for rounds in range(MAX_ROUNDS):
                response = await self._action(session, rounds)
                calls = [c for m in response.messages for c in (m.get("tool_calls") or [])]
                if not calls:
                    session.inject({"role": "user", "content": "Call the guess tool."})
                for call in calls:
                    try:
                        n = json.loads(call["function"]["arguments"]).get("n")
                    except (ValueError, RecursionError, AttributeError):
                        n = None
                    if n == index + 3:
                        session.inject({"role": "tool", "tool_call_id": call["id"], "content": "right"})
                        session.inject(RewardHistoryItem(reward=1))
                        return TaskSampleExecutionResult(status=SampleStatus.COMPLETED)
                    session.inject({"role": "tool", "tool_call_id": call["id"], "content": f"{n!r} is wrong"})
            return TaskSampleExecutionResult(status=SampleStatus.TASK_LIMIT_REACHED)
        except (AgentCancelledException, TimeoutError):
            return TaskSampleExecutionResult(status=SampleStatus.CANCELLED)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("controller")
    p.add_argument("port", type=int)
    p.add_argument("--idle-timeout", type=float)
    p.add_argument("--broken", choices=["leaks-idle"])
    a = p.parse_args()
    task = GuessTask(a.idle_timeout, leaks_idle=a.broken == "leaks-idle")
    worker = TaskWorker(task, controller_address=a.controller, self_address=f"http://127.0.0.1:{a.port}/api", heart_rate=1)
    worker.run("127.0.0.1", a.port)


if __name__ == "__main__":
    main()
