"""Shared helpers: drive DB episodes through agentrl_envs' runtime, as a worker would."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrl_envs import Episode, TaskRuntime, get_task

MYSQL_URL = os.environ.get("AGENTRL_TEST_MYSQL_URL")


def call(name: str, i: int = 0, **arguments: Any) -> dict[str, Any]:
    """An assistant message with one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


async def sql(episode: Episode, query: str) -> str:
    out = await episode.step([call("execute_sql", query=query)])
    return out.messages[0]["content"]


async def replay(runtime: TaskRuntime, index: int) -> float:
    """Replay the reference solution of sample ``index``; return the final reward."""
    episode = runtime.episode(index)
    await episode.start()
    out = None
    for i, step in enumerate(runtime.task_cls.reference_solution(runtime.samples[index])):
        out = await episode.step([call(step["name"], i, **step["arguments"])])
    assert out is not None and out.finish, f"sample {index}: the episode did not finish"
    return out.reward


async def _runtime(config: dict[str, Any]) -> AsyncIterator[TaskRuntime]:
    runtime = TaskRuntime(get_task("db"), split="dev", config=config)
    await runtime.open()
    try:
        yield runtime
    finally:
        await runtime.close()


def _config(backend: str) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "statement_timeout_s": 1}
    if not MYSQL_URL:
        pytest.skip('set AGENTRL_TEST_MYSQL_URL (e.g. eval "$(.ci/mariadb.sh | tail -n1)")')
    return {"backend": "mysql", "mysql_url": MYSQL_URL, "statement_timeout_s": 1}


@pytest.fixture
async def sqlite_runtime() -> AsyncIterator[TaskRuntime]:
    async for runtime in _runtime(_config("sqlite")):
        yield runtime


@pytest.fixture
async def mysql_runtime() -> AsyncIterator[TaskRuntime]:
    async for runtime in _runtime(_config("mysql")):
        yield runtime


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mariadb)])
async def runtime(request: pytest.FixtureRequest) -> AsyncIterator[TaskRuntime]:
    """Both backends: every behaviour test runs on SQLite, and on MariaDB when one is configured."""
    async for runtime in _runtime(_config(request.param)):
        yield runtime
