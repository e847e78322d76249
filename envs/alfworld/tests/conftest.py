"""ALFWorld test fixtures: a runtime of the task (engine in one process) and a small generated game."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentrl_envs import TaskRuntime, get_task


@pytest.fixture
async def runtime() -> AsyncIterator[TaskRuntime]:
    runtime = TaskRuntime(get_task("alfworld"), split="dev", config={"processes": 1})
    await runtime.open()
    try:
        yield runtime
    finally:
        await runtime.close()
