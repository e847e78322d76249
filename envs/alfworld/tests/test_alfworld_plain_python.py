"""The gym env for alfworld from plain Python: a script without a main guard, a program read from
stdin, ``python -c`` (what a notebook cell amounts to: no main file). Its engine processes are
fresh interpreters (``agentrl_env_alfworld._engine_process``), so none of these runs its top level
twice or loses its engine; and an engine process ends when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PROGRAM = """
import gymnasium as gym
import agentrl_envs
print("TOP", flush=True)
env = gym.make("agentrl/alfworld-v0", split="dev")
obs, info = env.reset(options={"index": 0})
assert "AVAILABLE ACTIONS" in obs["messages"][-1]["content"], obs
call = {"id": "c1", "type": "function", "function": {"name": "take_action", "arguments": '{"action": "look"}'}}
obs, reward, terminated, truncated, info = env.step({"role": "assistant", "content": None, "tool_calls": [call]})
assert obs["messages"][-1]["role"] == "tool" and not terminated and not truncated, (obs, info)
print("STEPPED", reward, flush=True)
env.close()
"""


def _check(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("TOP") == 1, out.stdout  # the top level ran once: not again in an engine
    assert "STEPPED 0.0" in out.stdout


@pytest.mark.timeout(300)
def test_a_script_without_a_main_guard(tmp_path) -> None:
    script = tmp_path / "play.py"
    script.write_text(PROGRAM)
    _check(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path))


@pytest.mark.timeout(300)
def test_a_program_on_stdin(tmp_path) -> None:
    _check(subprocess.run([sys.executable, "-"], input=PROGRAM, capture_output=True, text=True, timeout=240, cwd=tmp_path))


@pytest.mark.timeout(300)
def test_python_dash_c(tmp_path) -> None:
    _check(subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=240, cwd=tmp_path))


@pytest.mark.timeout(300)
def test_an_engine_process_ends_with_its_parent(tmp_path) -> None:
    holder = PROGRAM.split('print("STEPPED"')[0] + (
        "import os, time\n"
        "print('CHILDREN', ' '.join(open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()), flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    children: list[int] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("CHILDREN"):
                children = [int(x) for x in line.split()[1:]]
                break
        engines = [c for c in children if "_engine_process" in open(f"/proc/{c}/cmdline").read()]
        assert engines, f"no engine process among {children}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{c}") and _alive(c) for c in engines):
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{c}") and _alive(c) for c in engines), "an engine process outlived its parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
