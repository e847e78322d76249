"""The bfcl task: BFCL's data and tools, held-back functions, metrics, refused calls, reference replay."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from agentrl_env_bfcl import upstream
from agentrl_env_bfcl.categories import COLLECTIONS, GROUPS, MULTI_TURN, SUPPORTED, UNSUPPORTED
from agentrl_env_bfcl.reference import calls_message, reference_messages

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.check import check_task
from agentrl_envs.errors import DataError
from agentrl_envs.policy import as_policy
from agentrl_envs.stack import LocalStack

BFCL = get_task("bfcl")
#: BFCL's entry counts (its data files in bfcl-eval 2026.3.23).
SIZES = {**dict.fromkeys(MULTI_TURN, 200), "simple_python": 400, "irrelevance": 240}


@pytest.mark.parametrize("split", SUPPORTED)
def test_every_category_loads_bfcls_entries_with_their_tools(split):
    samples = BFCL.load_samples(split)
    assert len(samples) == SIZES.get(split, 200)
    sample = samples[0]
    assert sample["id"] == f"{split}_0" and sample["category"] == split
    runtime = TaskRuntime(BFCL, split=split)
    episode = runtime.episode(0)
    out = asyncio.run(episode.start())
    # the tools are BFCL's OpenAI handler's compilation of the entry's docs (held-back ones left out)
    assert out.tools == upstream.compile_tools(sample["entry"]["function"])
    assert out.messages == sample["entry"]["question"][0]
    assert out.metric["category"] == split and (out.metric["category_group"], out.metric["category_weight"]) == GROUPS[split]
    asyncio.run(episode.close())


def test_collections_interleave_their_categories():
    samples = BFCL.load_samples("all_supported")
    assert len(samples) == sum(SIZES.get(c, 200) for c in SUPPORTED)
    assert [s["category"] for s in samples[: len(SUPPORTED)]] == list(SUPPORTED)  # --limit 9: one of each
    assert [s["id"] for s in BFCL.load_samples("multi_turn")[4:6]] == ["multi_turn_base_1", "multi_turn_miss_func_1"]
    assert set(BFCL.splits) == {*SUPPORTED, *COLLECTIONS}


def test_unsupported_categories_say_why():
    with pytest.raises(DataError, match="needs the network"):
        BFCL.load_samples("web_search_base")
    assert set(UNSUPPORTED).isdisjoint(SUPPORTED)


async def test_held_back_functions_arrive_at_their_turn_with_bfcls_prompt():
    runtime = TaskRuntime(BFCL, split="multi_turn_miss_func")
    sample = runtime.samples[0]
    (turn, held), *_ = sample["entry"]["missed_function"].items()
    names = {f["name"] for f in held}
    episode = runtime.episode(0)
    start = await episode.start()
    assert names and names.isdisjoint(t["function"]["name"] for t in start.tools)
    for message in reference_messages(sample):
        out = await episode.step([message])
        if out.tools is not None:  # the step that opened the held-back turn
            break
    else:
        raise AssertionError("the held-back functions never came")
    assert out.messages[-1] == {"role": "user", "content": upstream.bfcl().added_functions_prompt}
    assert names <= {t["function"]["name"] for t in out.tools}
    assert sample["entry"]["question"][int(turn)] == [], "BFCL's held-back turn has no user message of its own"
    await episode.close()


async def test_calls_that_would_run_python_are_refused(tmp_path):
    """BFCL evaluates call strings: a builtin or code in a name must not run on the worker."""
    runtime = TaskRuntime(BFCL, split="multi_turn_base")
    target = tmp_path / "pwned"
    injected = {f"a=open(file={str(target)!r}, mode='w'),b": 1}
    message = calls_message([("open", {"file": str(target), "mode": "w"}), ("ls", injected), ("ls", {"a": True})])
    episode = runtime.episode(0)
    await episode.start()
    out = await episode.step([message])
    contents = [m["content"] for m in out.messages]
    assert contents[0] == "Error during execution: name 'open' is not defined"
    assert contents[1].startswith("Error during execution:")
    assert "current_directory_content" in contents[2]  # the harmless call still ran
    assert not target.exists()
    await episode.close()
    assert not os.path.exists(target)


async def test_sessions_release_bfcls_class_instances():
    runtime = TaskRuntime(BFCL, split="multi_turn_long_context")
    store = vars(upstream.bfcl().multi_turn_utils)
    before = {k for k in store if k.startswith("agentrl_")}
    sessions = InProcessSessions(runtime)
    t = await run_episode(sessions, "bfcl", 3, as_policy(BFCL.reference_policy(runtime.samples[3])))
    assert t.solved
    assert {k for k in store if k.startswith("agentrl_")} == before


async def test_single_turn_text_and_calls():
    runtime = TaskRuntime(BFCL, split="irrelevance")
    sessions = InProcessSessions(runtime)
    text = await run_episode(sessions, "bfcl", 0, as_policy(BFCL.reference_policy(runtime.samples[0])))
    assert text.solved and text.metrics["bfcl_valid"] is True
    tool = runtime.samples[0]["entry"]["function"][0]["name"].replace(".", "_")
    call = calls_message([(tool, {})])
    wrong = await run_episode(sessions, "bfcl", 0, _Once(call))
    assert wrong.reward == 0.0 and wrong.metrics["bfcl_error_type"] == "irrelevance_error:decoder_success"


class _Once:
    def __init__(self, message):
        self.message = message

    async def act(self, messages, tools):
        message, self.message = self.message, None
        return message


@pytest.mark.slow
@pytest.mark.parametrize("split", SUPPORTED)
def test_reference_replays_every_entry_at_one(split):
    async def replay() -> list[int]:
        runtime = TaskRuntime(BFCL, split=split)
        sessions = InProcessSessions(runtime)
        failed = []
        for i, sample in enumerate(runtime.samples):
            t = await run_episode(sessions, "bfcl", i, as_policy(BFCL.reference_policy(sample)))
            if not t.solved:
                failed.append((i, t.metrics.get("bfcl_error_type")))
        return failed

    assert asyncio.run(replay()) == []


@pytest.mark.slow
def test_check_through_controller_and_worker_on_the_held_back_split():
    """``agentrl-envs check bfcl --split multi_turn_miss_func``: over HTTP the tools change too."""
    with LocalStack(["bfcl"], split="multi_turn_miss_func") as stack:
        report = asyncio.run(check_task(stack.url, BFCL, split="multi_turn_miss_func", progress=False))
    assert (report.total, report.solved) == (200, 200), json.dumps(report.to_json()["samples"][:3])
