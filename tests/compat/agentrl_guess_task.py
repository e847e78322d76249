"""A task written against AgentRL's own SDK (agentrl-worker on PyPI), served by its TaskWorker,
for the wire-level conformance suite's protocol checks (tests/compat/test_conform_agentrl.py).

Run as: python agentrl_guess_task.py CONTROLLER_API_URL PORT
The model guesses a number with ``guess(n)`` (a described tool, as the suite's schema rules
want); the right one completes with reward 1, a wrong one is answered and the game goes on; a
round without a tool call gets a user reminder. Two sessions at most (the capacity check fills them).
"""

from __future__ import annotations

import json
import sys

from agentrl.worker.task import Session, Task
from agentrl.worker.task_worker import TaskWorker
from agentrl.worker.typings import RewardHistoryItem, SampleStatus, TaskSampleExecutionResult

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
    def __init__(self) -> None:
        super().__init__(name="agentrl-guess", concurrency=2, tools=TOOLS, full_async=True)

    def get_indices(self):
        return [0, 1, 2]

    async def start_sample(self, index, session: Session) -> TaskSampleExecutionResult:
        session.inject({"role": "user", "content": "Guess my number between 0 and 9."})
        while True:
            response = await session.action()
            calls = [c for m in response.messages for c in (m.get("tool_calls") or [])]
            if not calls:
                session.inject({"role": "user", "content": "Call the guess tool."})
            for call in calls:
                try:
                    n = json.loads(call["function"]["arguments"]).get("n")
                except ValueError:
                    n = None
                if n == index + 3:
                    session.inject({"role": "tool", "tool_call_id": call["id"], "content": "right"})
                    session.inject(RewardHistoryItem(reward=1))
                    return TaskSampleExecutionResult(status=SampleStatus.COMPLETED)
                session.inject({"role": "tool", "tool_call_id": call["id"], "content": "wrong"})


if __name__ == "__main__":
    controller, port = sys.argv[1], int(sys.argv[2])
    worker = TaskWorker(GuessTask(), controller_address=controller, self_address=f"http://127.0.0.1:{port}/api", heart_rate=1)
    worker.run("127.0.0.1", port)
