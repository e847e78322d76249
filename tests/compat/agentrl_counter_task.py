"""A task written against AgentRL's own SDK (agentrl-worker on PyPI), served by its TaskWorker.

Run as: python agentrl_counter_task.py CONTROLLER_API_URL PORT
The model must call ``count(n)`` with n = 1, 2, 3 in order; reaching 3 completes with reward 1.
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
            "name": "count",
            "description": "Say the next number.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
    }
]


class CounterTask(Task):
    def __init__(self) -> None:
        super().__init__(name="agentrl-counter", concurrency=4, tools=TOOLS, full_async=True)

    def get_indices(self):
        return [0, 1]

    async def start_sample(self, index, session: Session) -> TaskSampleExecutionResult:
        session.inject({"role": "user", "content": f"Count from 1 to 3 (sample {index})."})
        expected = 1
        while True:
            response = await session.action()
            calls = [c for m in response.messages for c in (m.get("tool_calls") or [])]
            for call in calls:
                n = json.loads(call["function"]["arguments"]).get("n")
                if n != expected:
                    session.inject({"role": "tool", "tool_call_id": call["id"], "content": f"wrong: expected {expected}"})
                    session.inject(RewardHistoryItem(reward=0))
                    return TaskSampleExecutionResult(status=SampleStatus.AGENT_INVALID_ACTION)
                session.inject({"role": "tool", "tool_call_id": call["id"], "content": f"ok {n}"})
                if n == 3:
                    session.inject(RewardHistoryItem(reward=1, metrics={"counted": 3}))
                    return TaskSampleExecutionResult(status=SampleStatus.COMPLETED)
                expected += 1


if __name__ == "__main__":
    controller, port = sys.argv[1], int(sys.argv[2])
    worker = TaskWorker(CounterTask(), controller_address=controller, self_address=f"http://127.0.0.1:{port}/api", heart_rate=1)
    worker.run("127.0.0.1", port)
