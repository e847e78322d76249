"""DB test fixtures: a runtime per backend (SQLite always; MariaDB when AGENTRL_TEST_MYSQL_URL is set)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrl_envs import TaskRuntime, get_task

MYSQL_URL = os.environ.get("AGENTRL_TEST_MYSQL_URL")


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
