"""The gymnasium env is the agent loop's client-side session: in-process and remote behave alike."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gymnasium.utils.env_checker import check_env
from tasks_for_tests import call

import agentrl_envs
from agentrl_envs.tasks.echo import EchoTask


def play(env) -> list[tuple]:
    """Reset to sample 1 (river), one wrong echo, one right one; what each call returned."""
    obs, info = env.reset(options={"index": 1})
    seen = [(obs["messages"], [t["function"]["name"] for t in obs["tools"]])]
    for text in ("stone", "river"):
        obs, reward, terminated, truncated, info = env.step(call("echo", f'{{"text": "{text}"}}'))
        seen.append((obs["messages"], reward, terminated, truncated, info["status"], info.get("outcome")))
    return seen


@pytest.mark.parametrize("mode", ["in-process", "controller"])
def test_both_transports_play_the_same_episode(mode, make_stack):
    if mode == "controller":
        stack = make_stack()
        stack.add_worker(EchoTask)
        env = agentrl_envs.make("echo", controller=stack.url)
    else:
        env = agentrl_envs.make("echo")
    try:
        check_env(env)
        seen = play(env)
    finally:
        env.close()
    opening, wrong, right = seen
    assert opening[1] == ["echo"] and opening[0][-1]["content"] == "Echo the word 'river'."
    assert wrong[1:] == (0.0, False, False, "running", None) and wrong[0][0]["role"] == "tool"
    assert right[1:] == (1.0, True, False, "completed", "solved")


def test_transcripts_are_identical_across_transports(make_stack):
    stack = make_stack()
    stack.add_worker(EchoTask)
    envs = [agentrl_envs.make("echo"), agentrl_envs.make("echo", controller=stack.url)]
    try:
        assert play(envs[0]) == play(envs[1])
    finally:
        for env in envs:
            env.close()


def test_a_reset_mid_episode_ends_the_old_session_and_step_after_the_end_needs_a_reset(make_stack):
    from gymnasium.error import ResetNeeded

    stack = make_stack()
    stack.add_worker(EchoTask)
    env = agentrl_envs.make("echo", controller=stack.url, render_mode="ansi")
    try:
        env.reset(options={"index": 0})
        env.step(call("echo", '{"text": "nope"}'))
        assert len(stack.service.sessions) == 1
        env.reset(options={"index": 2})  # the running session is cancelled
        assert len(stack.service.sessions) == 1
        assert "Echo the word 'stone'." in env.render()
        _, reward, terminated, _, info = env.step(call("echo", '{"text": "stone"}'))
        assert (reward, terminated, info["outcome"]) == (1.0, True, "solved")
        with pytest.raises(ResetNeeded):
            env.step(call("echo", '{"text": "stone"}'))
    finally:
        env.close()


def test_a_bad_index_raises_the_transports_error():
    from agentrl_envs.errors import UnknownSampleError

    env = agentrl_envs.make("echo")
    try:
        with pytest.raises(UnknownSampleError):
            env.reset(options={"index": 99})
    finally:
        env.close()


def test_importing_the_package_registers_the_gymnasium_ids():
    code = "import gymnasium as gym, agentrl_envs; env = gym.make('agentrl/echo-v0'); print(env.reset(options={'index': 0})[0]['messages'][-1]['content']); env.close()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Echo the word 'apple'."
