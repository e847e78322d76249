"""``agentrl-envs check``: play every sample's reference policy through controller and worker.

This is how a task proves its rewards are right: each sample's reference policy
(:meth:`Task.reference_policy`) plays the episode as a model would, through the one agent loop
(:func:`agentrl_envs.agent.run_episode`), seeing every observation, and the episode must end
``completed`` with reward 1.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .agent import MaxTurns, Transcript, run_episode
from .client import AsyncControllerClient
from .errors import AgentRLEnvsError
from .policy import as_policy
from .task import Task

#: A reference policy that never ends its episode is stopped after this many turns.
MAX_REFERENCE_TURNS = 200


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


def _result(index: int, t: Transcript) -> SampleCheck:
    error = t.error
    if not t.solved and error is None:
        last = [m.get("content") for m in t.messages if m.get("role") != "assistant"][-1:]
        error = str(t.metrics.get("error") or last)
    return SampleCheck(index, t.solved, t.status.value, t.reward, t.turns, None if t.solved else error)


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
        references = [task_cls.reference_policy(sample) for sample in samples]  # one fresh policy per episode
        checked = [i for i, reference in enumerate(references) if reference is not None]
        missing = [i for i, reference in enumerate(references) if reference is None]
        gate = asyncio.Semaphore(concurrency)
        bar = tqdm(total=len(checked), desc=f"check {task_cls.name}", disable=not progress, unit="sample")
        solved = 0

        async def run(i: int) -> SampleCheck:
            nonlocal solved
            reference = references[i]
            assert reference is not None
            async with gate:
                t = await run_episode(
                    client,
                    task_cls.name,
                    indices[i],
                    as_policy(reference),
                    stops=[MaxTurns(MAX_REFERENCE_TURNS)],
                    start_timeout=60.0,
                )
            solved += t.solved
            bar.update(1)
            bar.set_postfix(solved=solved, refresh=False)
            return _result(i, t)

        results = await asyncio.gather(*(run(i) for i in checked))
        bar.close()
    return CheckReport(task_cls.name, len(results), sum(r.solved for r in results), list(results), missing)
