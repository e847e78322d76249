"""The ``easy`` / ``easy-test`` / ``easy-val`` splits: sizes, no overlap, regenerated identically, every
reference scores 1 through the real task, a wrong episode scores 0, the 3-round limit holds."""

from __future__ import annotations

import json

import pytest
from agentrl_env_db import DBTask
from agentrl_env_db.make_easy import make_splits
from agentrl_env_db.prompts import EASY_EXAMPLES, EASY_SYSTEM_PROMPT
from db_helpers import call, replay

from agentrl_envs import TaskRuntime, get_task


def _key(sample: dict) -> str:
    return json.dumps([sample["description"], sample["table"]], sort_keys=True)


def test_easy_splits_are_listed_sized_disjoint_and_reproducible() -> None:
    assert {"easy", "easy-test", "easy-val"} <= set(DBTask.splits)
    train, test, val = (DBTask.load_samples(s) for s in ("easy", "easy-test", "easy-val"))
    assert (len(train), len(test), len(val)) == (200, 100, 100)
    keys = [{_key(s) for s in split} for split in (train, test, val)]
    assert [len(k) for k in keys] == [200, 100, 100]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]
    # the shipped files are the generator's output
    assert make_splits() == {"easy": train, "easy-test": test, "easy-val": val}
    assert {s["type"][0] for s in train} == {"SELECT", "INSERT", "DELETE", "UPDATE"}
    assert {s["type"][0] for s in val} == {"SELECT", "INSERT", "DELETE", "UPDATE"}


@pytest.mark.parametrize("split", ["easy", "easy-test", "easy-val"])
async def test_every_easy_reference_scores_1(split: str) -> None:
    runtime = TaskRuntime(get_task("db"), split=split, config={"backend": "sqlite"})
    await runtime.open()
    try:
        assert [i for i in runtime.indices if await replay(runtime, i) != 1.0] == []
    finally:
        await runtime.close()


async def test_easy_session_prompt_limit_and_wrong_answers() -> None:
    runtime = TaskRuntime(get_task("db"), split="easy-test", config={"backend": "sqlite"})
    await runtime.open()
    try:
        mutation = next(i for i, s in enumerate(runtime.samples) if s["type"][0] != "SELECT")
        episode = runtime.episode(mutation)
        assert type(episode.task) is DBTask and episode.task.turn_limit == 3  # the sample's own limit
        first = await episode.start()
        assert first.messages[0]["content"] == EASY_SYSTEM_PROMPT
        assert first.messages[1:-1] == EASY_EXAMPLES  # the worked examples, then the question
        assert first.messages[-1] == {"role": "user", "content": f"Question: {runtime.samples[mutation]['description']}\n"}
        out = await episode.step([call("commit_final_answer", answers=[])])  # nothing changed: wrong
        assert out.finish and out.reward == 0.0

        select = next(i for i, s in enumerate(runtime.samples) if s["type"][0] == "SELECT")
        episode = runtime.episode(select)
        await episode.start()
        out = await episode.step([call("commit_final_answer", answers=["no such value"])])
        assert out.finish and out.reward == 0.0

        episode = runtime.episode(select)
        await episode.start()
        for _ in range(3):
            out = await episode.step([{"role": "assistant", "content": "thinking"}])
        assert out.finish and out.status.value == "task limit reached"
    finally:
        await runtime.close()

    dev = TaskRuntime(get_task("db"), split="dev", config={"backend": "sqlite"})
    assert dev.episode(0).task.turn_limit == DBTask.max_turns == 15
    # The operator's option overrides the sample's limit and the class default.
    forced = TaskRuntime(get_task("db"), split="easy-test", config={"backend": "sqlite", "max_turns": 5})
    assert forced.episode(0).task.turn_limit == 5 and DBTask.max_turns == 15
