"""THE PROOF: every dev sample's reference solution scores 1, so the table hash reproduces
AgentBench's MySQL 8 ``answer_md5`` for all 40 mutations and the SELECT scoring accepts every label."""

from __future__ import annotations

import pytest
from db_helpers import replay

from agentrl_envs import TaskRuntime


async def _all_rewards(runtime: TaskRuntime) -> dict[int, float]:
    return {i: await replay(runtime, i) for i in runtime.indices}


async def test_sqlite_replays_all_dev_samples(sqlite_runtime: TaskRuntime) -> None:
    rewards = await _all_rewards(sqlite_runtime)
    assert len(rewards) == 60
    assert [i for i, r in rewards.items() if r != 1.0] == []


@pytest.mark.mariadb
async def test_mysql_replays_all_dev_samples(mysql_runtime: TaskRuntime) -> None:
    rewards = await _all_rewards(mysql_runtime)
    assert len(rewards) == 60
    assert [i for i, r in rewards.items() if r != 1.0] == []
