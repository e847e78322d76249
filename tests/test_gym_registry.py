"""Every installed task is a gymnasium env: registered as agentrl/<task>-v0, made with gymnasium.make.

gymnasium's own check_env over every installed task is part of the conformance suite
(agentrl_envs.conformance, run on every task by tests/test_conformance.py)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from test_conformance import require_runnable

import agentrl_envs
from agentrl_envs.integrations.gym import register_all


@pytest.mark.parametrize("env_id", register_all())
def test_gymnasium_make_with_spec_resets_and_renders(env_id):
    require_runnable(env_id.split("/")[1].removesuffix("-v0"))
    env = gym.make(env_id, render_mode="ansi")
    try:
        obs, info = env.reset(seed=0)
        assert obs in env.observation_space and "index" in info
        assert isinstance(env.render(), str)
    finally:
        env.close()


def test_db_is_installed_and_its_episode_runs_through_gymnasium():
    assert "db" in agentrl_envs.task_names()
    env = agentrl_envs.make("db", split="dev")
    obs, _ = env.reset(options={"index": 0})
    assert [m["role"] for m in obs["messages"]] == ["system", "user"]
    call = {
        "id": "c1",
        "type": "function",
        "function": {
            "name": "execute_sql",
            "arguments": '{"query": "SELECT COUNT(*) FROM `US Ambassadors and Envoy Extraordinary to Colombia`"}',
        },
    }
    obs, reward, terminated, truncated, info = env.step({"role": "assistant", "tool_calls": [call]})
    assert obs["messages"][0]["content"].startswith("[(") and not terminated and not truncated and info["status"] == "running"
    env.close()
