"""gymnasium's own checker over every installed task (one parametrized test, as gymnasium does)."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl_envs
from agentrl_envs.gym_env import register_all


def require_runnable(task: str) -> None:
    """The os task needs its sandbox (bubblewrap + rootfs): skip without it, fail under CI."""
    if task != "os":
        return
    from agentrl_envs.sandbox.bwrap import missing_requirements
    from agentrl_envs.sandbox.rootfs import default_rootfs_path

    problem = missing_requirements(default_rootfs_path())
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem)
        pytest.skip(f"{problem} (run .ci/os-sandbox.sh)")


@pytest.mark.parametrize("task", agentrl_envs.task_names())
def test_check_env_on_every_installed_task(task):
    require_runnable(task)
    env = agentrl_envs.make(task)
    try:
        check_env(env)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", register_all())
def test_gymnasium_make_with_spec_passes_check_env(env_id):
    require_runnable(env_id.split("/")[1].removesuffix("-v0"))
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
