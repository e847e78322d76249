"""Helpers for the DB tests: drive episodes through agentrl_envs' runtime, as a worker would."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import pytest

from agentrl_envs import Episode, TaskRuntime
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.policy import as_policy


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


async def statement_left_running(runtime: TaskRuntime, prefix: str) -> bool:
    """Whether a statement starting with ``prefix`` still runs after its timeout was answered: on
    MySQL, in the server's process list; on SQLite (in the worker's threads), whether the worker
    spends more than half of a second of CPU time in the next second."""
    if runtime.config.backend == "mysql":
        rows = await runtime.resources.admin(
            f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '{prefix}%' AND COMMAND <> 'Sleep'"
        )
        return rows[0][0] > 0
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(1.0)
    return (time.process_time() - cpu) / (time.perf_counter() - wall) > 0.5


async def replay(runtime: TaskRuntime, index: int) -> float:
    """Play the reference policy of sample ``index`` through the agent loop; return the final reward."""
    reference = as_policy(runtime.task_cls.reference_policy(runtime.samples[index]))
    t = await run_episode(InProcessSessions(runtime), runtime.name, index, reference)
    assert t.outcome is not None and t.outcome.scored, f"sample {index}: {t.status.value}: {t.error}"
    assert t.metrics.get("stopped_by_client") is None, f"sample {index}: the reference ran out before the episode ended"
    return t.reward


def require_mysql() -> str:
    """The test server's URL (``AGENTRL_TEST_MYSQL_URL``); skips without one, except under
    ``CI=true`` (``.ci/run`` starts the server), where it fails."""
    url = os.environ.get("AGENTRL_TEST_MYSQL_URL")
    if not url:
        hint = 'set AGENTRL_TEST_MYSQL_URL (e.g. eval "$(.ci/mariadb.sh | tail -n1)")'
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but " + hint)
        pytest.skip(hint)
    return url
