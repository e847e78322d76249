"""The ``easy`` / ``easy-test`` / ``easy-val`` splits: sizes, no overlap, regenerated identically; on the
sandbox every reference scores 1 (through ``agentrl-envs check``), wrong episodes score 0 and
the 3-round limit holds."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentrl_env_os import OSTask
from agentrl_env_os.make_easy import make_splits
from agentrl_env_os.prompts import EASY_SYSTEM_PROMPT
from agentrl_env_os.samples import normalize
from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.cli import main


def _call(name: str, **arguments: str) -> dict:
    return {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


def test_easy_splits_are_listed_sized_disjoint_and_reproducible() -> None:
    assert {"easy", "easy-test", "easy-val"} <= set(OSTask.splits)
    train, test, val = (OSTask.load_samples(s) for s in ("easy", "easy-test", "easy-val"))
    assert (len(train), len(test), len(val)) == (200, 100, 100)
    keys = [{s["description"] for s in split} for split in (train, test, val)]
    assert [len(k) for k in keys] == [200, 100, 100]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]
    generated = make_splits()
    assert set(generated) == {"easy", "easy-test", "easy-val"}
    assert [normalize(p) for p in generated["easy"]] == train and [normalize(p) for p in generated["easy-test"]] == test
    assert [normalize(p) for p in generated["easy-val"]] == val
    assert all(
        OSTask.reference_policy(s) is not None and s["prompt"] == "easy" and s["max_turns"] == 3 for s in train + test + val
    )
    # easy-val has exactly easy-test's mix of kinds (so validation figures track test ones)
    assert Counter(s["labels"][0] for s in val) == Counter(s["labels"][0] for s in test)


@pytest.mark.parametrize("split", ["easy", "easy-test", "easy-val"])
def test_check_easy_solves_every_sample(rootfs, capsys, split: str) -> None:
    main(["check", "os", "--split", split, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == len(OSTask.load_samples(split)) and report["rate"] == 1.0


async def test_easy_session_prompt_limit_and_wrong_answers(rootfs) -> None:
    runtime = TaskRuntime(get_task("os"), split="easy-test", config={"rootfs": str(rootfs)})
    await runtime.open()
    try:
        check = next(i for i, s in enumerate(runtime.samples) if s["check"])
        episode = runtime.episode(check)
        assert type(episode.task) is OSTask and episode.task.turn_limit == 3  # the sample's own limit
        first = await episode.start()
        assert first.messages[0]["content"] == EASY_SYSTEM_PROMPT
        assert first.messages[1]["content"] == runtime.samples[check]["description"]
        out = await episode.step([_call("finish_action", thought="done")])  # nothing done: wrong
        assert out.finish and out.reward == 0.0

        episode = runtime.episode(check)
        await episode.start()
        for _ in range(3):
            out = await episode.step([{"role": "assistant", "content": "thinking"}])
        assert out.finish and out.status.value == "task limit reached"
    finally:
        await runtime.close()


async def test_answers_the_check_cannot_receive_and_a_lone_surrogate_are_the_models_errors(rootfs) -> None:
    """A NUL ("\\u0000", an escape the tool-call grammar allows), an answer past one argument's
    length (the check's argv) and a lone surrogate ("\\udc80", bash's UTF-8) each ended the
    episode ``task error`` (an infrastructure failure, replayed and dropped): now tool errors."""
    runtime = TaskRuntime(get_task("os"), split="easy-test", config={"rootfs": str(rootfs)})
    await runtime.open()
    try:
        check = next(i for i, s in enumerate(runtime.samples) if s["check"])
        episode = runtime.episode(check)
        await episode.start()
        out = await episode.step([_call("answer_action", answer="4\x002")])
        assert not out.finish and out.status.value == "running"
        assert (
            out.messages[0]["content"]
            == "Error: the answer contains a NUL character (\\u0000), which the task's check cannot receive"
        )
        out = await episode.step([_call("answer_action", answer="4" * 200_000)])
        assert not out.finish and "longer than the task's check can receive (131,071 bytes)" in out.messages[0]["content"]
        assert out.metric["tool_errors"] == 2
        out = await episode.step([_call("finish_action", thought="done")])  # the round limit's last: judged
        assert out.finish and out.status.value == "completed" and out.reward == 0.0

        episode = runtime.episode(check)
        await episode.start()
        out = await episode.step([_call("bash_action", script="echo \udc80")])
        assert not out.finish and "not valid JSON (a lone surrogate \\udc80 in a string)" in out.messages[0]["content"]
    finally:
        await runtime.close()


@pytest.mark.parametrize("script", ["echo done; exit 0", "set -e; false", "exec sh"])
async def test_a_command_that_ends_the_shell_fails_the_episode_not_the_task(rootfs, script: str) -> None:
    """`exit` closing a script (common in models' bash), `set -e`, `exec`: the session's shell is
    gone. AgentBench then counts the sample wrong; this ended it `task error` (dropped from
    training and from the figures). Now the model's failure: `agent invalid action`, reward 0."""
    runtime = TaskRuntime(get_task("os"), split="easy-test", config={"rootfs": str(rootfs)})
    await runtime.open()
    try:
        episode = runtime.episode(0)
        await episode.start()
        out = await episode.step([_call("bash_action", script=script)])
        assert out.finish and out.status.value == "agent invalid action" and out.reward == 0.0
        assert out.messages[0]["content"].startswith("The OS environment stopped: the sandbox's shell exited")
        assert out.metric["error"].startswith("sandbox: the sandbox's shell exited")
    finally:
        await runtime.close()
