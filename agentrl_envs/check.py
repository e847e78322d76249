"""``agentrl-envs check``: replay every sample's reference solution through controller and worker.

This is how a task proves its rewards are right: each sample's reference tool calls are sent one
per turn, as a model would send them, and the episode must end ``completed`` with reward 1.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .client import AsyncControllerClient
from .errors import AgentRLEnvsError
from .schema import function_call
from .task import Task


@dataclass
class SampleCheck:
    index: int
    solved: bool
    status: str
    reward: float
    turns: int
    error: str | None = None


@dataclass
class CheckReport:
    """``total`` counts the samples that have a reference solution; the others are listed in
    ``without_reference`` and are neither solved nor failed."""

    task: str
    total: int
    solved: int
    samples: list[SampleCheck] = field(default_factory=list)
    without_reference: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.solved / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "total": self.total,
            "solved": self.solved,
            "rate": self.rate,
            "without_reference": self.without_reference,
            "samples": [asdict(s) for s in self.samples],
        }


def assistant_turn(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [function_call(f"call_{uuid.uuid4().hex[:12]}", name, arguments)]}


async def _check_one(client: AsyncControllerClient, task: str, index: int, solution: list[dict[str, Any]]) -> SampleCheck:
    try:
        sid, first = await client.start_sample(task, index)
        if first.finish:
            return SampleCheck(index, False, first.status.value, first.reward, 0, "episode ended at start")
        turns, out = 0, None
        for call in solution:
            out = await client.interact(sid, [assistant_turn(call["name"], call.get("arguments", {}))])
            turns += 1
            if out.finish:
                break
        if out is None or not out.finish:
            await client.cancel(sid)
            return SampleCheck(index, False, "running", 0.0, turns, "reference solution did not end the episode")
        solved = out.status.value == "completed" and out.reward >= 1.0
        error = None if solved else str(out.metrics.get("error") or [m.get("content") for m in out.messages][-1:])
        return SampleCheck(index, solved, out.status.value, out.reward, turns, error)
    except AgentRLEnvsError as e:
        return SampleCheck(index, False, "error", 0.0, 0, e.message)


async def check_task(
    controller_url: str,
    task_cls: type[Task],
    *,
    split: str | None = None,
    data: str | Path | None = None,
    concurrency: int = 8,
    progress: bool = True,
) -> CheckReport:
    samples = task_cls.load_samples(split=split, data=data)
    async with AsyncControllerClient(controller_url) as client:
        indices = await client.get_indices(task_cls.name)
        if len(indices) != len(samples):
            raise AgentRLEnvsError(
                f"the worker serves {len(indices)} samples of {task_cls.name!r}, this checker loaded {len(samples)}: same split/data?"
            )
        solutions = {i: task_cls.reference_solution(sample) for i, sample in enumerate(samples)}
        checked = [i for i, solution in solutions.items() if solution is not None]
        gate = asyncio.Semaphore(concurrency)
        bar = tqdm(total=len(checked), desc=f"check {task_cls.name}", disable=not progress, unit="sample")

        async def run(i: int) -> SampleCheck:
            async with gate:
                result = await _check_one(client, task_cls.name, i, solutions[i] or [])
                bar.update(1)
                return result

        results = await asyncio.gather(*(run(i) for i in checked))
        bar.close()
    missing = [i for i, solution in solutions.items() if solution is None]
    return CheckReport(task_cls.name, len(results), sum(r.solved for r in results), list(results), missing)
