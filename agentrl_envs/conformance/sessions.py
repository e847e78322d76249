"""In-process sessions for the checks: a task's runtime, an episode of one sample, its start."""

from __future__ import annotations

import contextlib
from typing import Any

from ..episode import Episode, TaskRuntime
from ..task import Task
from .common import shorten


@contextlib.asynccontextmanager
async def open_runtime(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> Any:
    runtime = TaskRuntime(task_cls, split=split, config=config)
    await runtime.open()
    try:
        yield runtime
    finally:
        await runtime.close()


def episode_of(runtime: TaskRuntime, index: int, max_turns: int | None = None) -> Episode:
    """An episode of sample ``index``; with ``max_turns`` its sample carries that ``max_turns``."""
    sample = runtime.sample(index)
    if max_turns is not None:
        sample = {**sample, "max_turns": max_turns}
    return Episode(runtime.task_cls(sample, config=runtime.config, resources=runtime.resources), index=index)


def ended(out: Any) -> str:
    why = out.metric.get("error") if isinstance(out.metric, dict) else None
    return f"status {out.status.value!r}, reward {out.reward}" + (f", error: {shorten(why)}" if why else "")


async def start(episode: Episode, who: str) -> list[dict[str, Any]]:
    out = await episode.start()
    assert not out.finish, f"{who}: expected sample {episode.index} to start, got the episode ended at setup ({ended(out)})"
    return out.messages
