"""DB test fixtures: a runtime per backend (SQLite always; MariaDB when AGENTRL_TEST_MYSQL_URL is set)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from db_helpers import require_mysql

from agentrl_envs import TaskRuntime, get_task


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
    return {"backend": "mysql", "mysql_url": require_mysql(), "statement_timeout_s": 1}


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
