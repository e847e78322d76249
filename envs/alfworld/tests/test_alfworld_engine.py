"""The engine: the caches change nothing the model sees; the logic variants are ALFWorld's own."""

from __future__ import annotations

import json
import subprocess
import sys

from agentrl_env_alfworld.engine import logic_files

# Plays a game's expert commands and prints every observation; with "cached" the caches and the
# reused PddlEnv (GameSlot), else TextWorld's PddlEnv as it ships, in a process of its own.
_PLAY = r"""
import json, sys
from agentrl_env_alfworld.engine import GameSlot, Observation, game_data
from agentrl_env_alfworld.reference import expert_steps
from agentrl_env_alfworld.samples import load_split
from agentrl_env_alfworld.scenes import build_game

sample = load_split("dev")[int(sys.argv[2])]
game = build_game(sample)
data = game_data(game.problem, game.goal)
argv = list(sys.argv)
if sys.argv[1] == "cached":
    slot = GameSlot()
    slot.start(data)  # a second game load into the same slot must play the same
    start, step = slot.start, slot.step
else:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv
    env = AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)), shuffle=False)
    def start(d):
        env.load(d)
        return env.reset()
    def step(c):
        return env.step(c)[0]
def show(s):
    return [s.text, s.commands, s.won] if isinstance(s, Observation) else [s.feedback, s["admissible_commands"], s["won"]]
out = [show(start(data))]
for kind, *args in expert_steps(game):
    command = {"do": lambda: args[0], "open": lambda: f"open {args[0]}", "put": lambda: f"put {args[0]} in/on {args[1]}"}[kind]()
    out.append(show(step(command)))
print(json.dumps({"transcript": out, "argv_kept": sys.argv == argv}))
"""


def _play(mode: str, index: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _PLAY, mode, str(index)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cached_engine_says_exactly_what_textworld_says():
    index = 2  # a bathroom clean-and-place game: small, so the uncached engine is quick
    plain, cached = _play("plain", index), _play("cached", index)
    assert cached["transcript"] == plain["transcript"]
    assert cached["transcript"][-1][2] is True  # the expert's last command wins the game
    assert cached["argv_kept"]  # fast_downward.pddl2sas overwrites sys.argv; the cache puts it back


def test_agentbench_logic_is_alfworld_2_1_1():
    domain, grammar = logic_files("agentbench")
    assert 'template :: "put {o} in/on {r}";' in grammar and "move {o} to {r}" not in grammar
    assert "You arrive at {lend.name}." in grammar and "action help" not in grammar
    assert "(:action help" not in domain and domain.rstrip().endswith(")")
    domain2, grammar2 = logic_files("alfworld")
    assert "(:action help" in domain2 and 'template :: "move {o} to {r}";' in grammar2
    # only the help action differs between the domains
    start = domain2.index("(:action help")
    help_action = domain2[start : domain2.index("\n)\n", start) + 3]
    assert domain2.replace(help_action, "").split() == domain.split()


def test_default_engine_processes_are_the_cores_this_process_may_run_on():
    """Unset ``processes``: one engine process per core the worker may use (``taskset``, a
    container's cpuset), not per core of the machine."""
    import os

    from agentrl_env_alfworld.pool import EnginePool

    allowed = os.sched_getaffinity(0)
    assert EnginePool().size == len(allowed) and EnginePool(3).size == 3
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert EnginePool().size == 1
    finally:
        os.sched_setaffinity(0, allowed)
