"""Sessions of the alfworld task: AgentBench's text, the engine's observations, the end rules."""

from __future__ import annotations

import json

import pytest

from agentrl_env_alfworld import ALFWorldTask
from agentrl_env_alfworld.prompts import NO_TOOL_CALL, SYSTEM_PROMPT, parse_available_actions
from agentrl_env_alfworld.reference import expert_steps
from agentrl_env_alfworld.scenes import build_game
from agentrl_envs import SampleStatus, TaskRuntime
from agentrl_envs.errors import DataError
from agentrl_envs.policy import call_turn


def act(action: str) -> dict:
    return call_turn("take_action", {"action": action})


async def test_opening_messages_are_agentbenchs(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    out = await ep.start()
    system, user = out.messages
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    text = user["content"]
    assert text.startswith("Here is your task. You are in the middle of a room. Looking quickly around you, you see a ")
    goal = runtime.samples[0]["goal"]
    assert f".\nYour task is to: {goal}. AVAILABLE ACTIONS: " in text and text.endswith("\n")
    assert "-= Welcome to TextWorld, ALFRED! =-" not in text
    commands = parse_available_actions(text)
    assert "look" in commands and "inventory" in commands and any(c.startswith("go to ") for c in commands)
    assert "help" not in commands  # ALFWorld 2.1.1's logic, as AgentBench's games
    assert out.tools == ALFWorldTask.tool_definitions()
    assert out.tools[0]["function"]["parameters"]["properties"]["action"]["description"] == "The action you would like to take"
    await ep.close()


async def test_free_text_is_mapped_and_impossible_actions_say_nothing_happens(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    start = await ep.start()
    receptacle = next(c for c in parse_available_actions(start.messages[1]["content"]) if c.startswith("go to "))[6:]
    out = await ep.step([act(f"I should go to the {receptacle} now")])
    text = out.messages[0]["content"]
    assert out.messages[0]["role"] == "tool" and not out.finish
    assert text.startswith((f"On the {receptacle}", f"The {receptacle} is"))  # "You arrive at loc N. " dropped
    out = await ep.step([act("xyzzy")])
    assert out.messages[0]["content"].startswith("Nothing happens. AVAILABLE ACTIONS: ")
    await ep.close()


async def test_same_action_three_times_in_a_row_fails_as_agentbench(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    for _ in range(3):
        out = await ep.step([act("look")])
        assert not out.finish  # three at steps 1-3: AgentBench's check needs more than three steps
    out = await ep.step([act("look")])
    assert out.finish and out.status == SampleStatus.AGENT_INVALID_ACTION and out.reward == 0
    await ep.close()


async def test_no_tool_call_gets_agentbenchs_message(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    out = await ep.step([{"role": "assistant", "content": "I think I will look around."}])
    assert out.messages == [{"role": "user", "content": NO_TOOL_CALL}] and not out.finish
    await ep.close()


async def test_expert_wins_with_reward_one_and_wrong_put_does_not(runtime: TaskRuntime) -> None:
    index = next(i for i, s in enumerate(runtime.samples) if s["task_type"] == "pick_heat_then_place_in_recep")
    sample = runtime.samples[index]
    steps = expert_steps(build_game(sample))
    ep = runtime.episode(index)
    out = await ep.start()
    available = parse_available_actions(out.messages[1]["content"])
    for step in steps:
        if step[0] == "open" and f"open {step[1]}" not in available:
            continue
        if step[0] == "do" and step[1].startswith("heat "):
            continue  # skip heating: putting a cold object in place must not win
        command = f"put {step[1]} in/on {step[2]}" if step[0] == "put" else (step[1] if step[0] == "do" else f"open {step[1]}")
        assert command in available, command
        out = await ep.step([act(command)])
        available = parse_available_actions(out.messages[0]["content"])
    assert not out.finish and out.messages[0]["content"].startswith("You put the ")
    await ep.close()


async def test_round_limit_is_twenty(runtime: TaskRuntime) -> None:
    ep = runtime.episode(1)
    assert ep.task.turn_limit == 20
    await ep.start()
    actions = ["look", "inventory"] * 10
    for i, a in enumerate(actions):
        out = await ep.step([act(a)])
        assert out.finish == (i == 19)
    assert out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0
    await ep.close()


def test_generated_splits_cover_all_six_task_types_deterministically() -> None:
    """`agentrl-envs check alfworld --split dev` (the conformance suite's reference replay, which
    requires every sample solved) therefore covers every task type."""
    from collections import Counter

    from agentrl_env_alfworld.samples import load_split
    from agentrl_env_alfworld.scenes import TASK_TYPES

    dev = load_split("dev")
    counts = Counter(s["task_type"] for s in dev)
    assert set(counts) == set(TASK_TYPES) and min(counts.values()) == len(dev) // len(TASK_TYPES) == 4
    assert {s["floor_plan"] // 100 for s in dev} == {0, 2, 3, 4}  # kitchens, living rooms, bedrooms, bathrooms
    assert build_game(dev[0]).problem == build_game(dict(dev[0])).problem  # a pure function of the spec
    assert not {s["floor_plan"] for s in dev} & {s["floor_plan"] for s in load_split("train")[:200]}  # unseen scenes


def test_custom_tasks_are_validated() -> None:
    spec = ALFWorldTask.load_samples("dev")[0]
    assert ALFWorldTask.sample_from_custom(spec) == spec
    with pytest.raises(DataError, match="task_type"):
        ALFWorldTask.sample_from_custom({**spec, "task_type": "juggle"})
    with pytest.raises(DataError, match="game_file"):
        ALFWorldTask.sample_from_custom({"game_file": "/nonexistent/game.tw-pddl"})


async def _play(ep, policy) -> tuple[list[str], object]:
    """Play ``policy`` to the end of ``ep``; the actions sent and the last output."""
    out = await ep.start()
    messages, sent = list(out.messages), []
    while not out.finish:
        turn = await policy.act(messages, out.tools or [])
        assert turn is not None, "the policy gave up"
        sent.append(json.loads(turn["tool_calls"][0]["function"]["arguments"])["action"])
        out = await ep.step([turn])
        messages += [turn, *out.messages]
    await ep.close()
    return sent, out


async def test_alfworld_game_files_play_with_their_walkthrough(tmp_path, runtime: TaskRuntime) -> None:
    """data=PATH: ALFWorld's json_2.1.1 layout or an AgentBench split file; the game's stored
    walkthrough is the reference and wins."""
    from agentrl_env_alfworld.engine import game_data

    sample = runtime.samples[5]  # pick two
    walkthrough, out = await _play(runtime.episode(5), ALFWorldTask.reference_policy(sample))
    assert out.reward == 1 and out.status == SampleStatus.COMPLETED
    game = build_game(sample)
    trial = tmp_path / "json_2.1.1" / "valid_unseen" / f"{sample['task_type']}-X-None-Y-1" / "trial_T1"
    trial.mkdir(parents=True)
    data = {**game_data(game.problem, game.goal), "solvable": True, "walkthrough": walkthrough}
    (trial / "game.tw-pddl").write_text(json.dumps(data))
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"pick_two_obj": [str((trial / "game.tw-pddl").relative_to(tmp_path))]}))
    for source in (tmp_path / "json_2.1.1", split):
        samples = ALFWorldTask.load_samples(data=source)
        assert [s["task_type"] for s in samples] == ["pick_two_obj_and_place"]
    files = TaskRuntime(ALFWorldTask, data=split, config={"processes": 0})
    await files.open()
    try:
        from agentrl_envs.policy import as_policy

        sent, out = await _play(files.episode(0), as_policy(ALFWorldTask.reference_policy(files.samples[0])))
    finally:
        await files.close()
    assert sent == walkthrough and out.reward == 1 and out.status == SampleStatus.COMPLETED
