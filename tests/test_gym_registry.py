"""gymnasium's own checker over every installed task (one parametrized test, as gymnasium does)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl_envs
from agentrl_envs.gym_env import register_all


@pytest.mark.parametrize("task", agentrl_envs.task_names())
def test_check_env_on_every_installed_task(task):
    env = agentrl_envs.make(task)
    try:
        check_env(env)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", register_all())
def test_gymnasium_make_with_spec_passes_check_env(env_id):
    env = gym.make(env_id, render_mode="ansi")
    try:
        check_env(env.unwrapped)
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
