"""The task-author API and the episode loop, in-process."""

from __future__ import annotations

import threading

import pytest
from tasks_for_tests import Calc, call

from agentrl_envs import SampleStatus, TaskRuntime
from agentrl_envs.errors import DataError, SessionFinishedError, UnknownSampleError


def test_tool_schemas_come_from_signatures_and_docstrings():
    defs = {d["function"]["name"]: d["function"] for d in Calc.tool_definitions()}
    assert set(defs) == {"add", "answer", "nap", "explode"}
    assert defs["add"]["description"] == "Add two integers."
    assert defs["add"]["parameters"] == {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "description": "The first addend."},
            "y": {"type": "integer", "description": "The second addend.", "default": 0},
        },
        "required": ["x"],
        "additionalProperties": False,
    }


def test_untyped_tool_parameter_is_rejected_at_class_creation():
    from agentrl_envs import Task, tool

    with pytest.raises(TypeError, match="needs a type hint"):

        class Bad(Task):
            @tool
            def f(self, x) -> str:
                return x


@pytest.fixture
def runtime():
    return TaskRuntime(Calc, split="dev")


async def test_bad_calls_answered_with_readable_tool_messages(runtime, monkeypatch):
    monkeypatch.setattr(runtime.task_cls, "max_turns", 100)  # every case a round of one episode
    ep = runtime.episode(0)
    await ep.start()
    cases = {
        "not json": ("add", "{x: 1"),
        "unknown tool": ("fly", "{}"),
        "wrong type": ("add", '{"x": "two"}'),
        "missing": ("add", '{"y": 1}'),
        "extra": ("add", '{"x": 1, "z": 2}'),
        "not an object": ("add", "[1, 2]"),
        "lone surrogate": ("add", '{"x": "\\udc80"}'),
        "too deep": ("add", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        "too long an integer": ("add", '{"x": ' + "9" * 5000 + "}"),
    }
    expected = {
        "not json": "not valid JSON",
        "unknown tool": "unknown tool `fly`",
        "wrong type": "`x`: Input should be a valid integer",
        "missing": "missing required argument `x`",
        "extra": "unexpected argument `z`",
        "not an object": "must be a JSON object",
        "lone surrogate": "not valid JSON (a lone surrogate \\udc80 in a string)",
        "too deep": "not valid JSON (nested too deeply)",
        "too long an integer": "not valid JSON (an integer of more than 4300 digits)",
    }
    for key, (name, args) in cases.items():
        out = await ep.step([call(name, args)])
        assert not out.finish
        assert out.messages[0]["role"] == "tool" and out.messages[0]["tool_call_id"] == "c1"
        assert out.messages[0]["content"].startswith("Error:") and expected[key] in out.messages[0]["content"], key
    assert out.metric["tool_errors"] == len(cases)
    out = await ep.step([call("add", '{"x": 2, "y": 5}')])
    assert out.messages[0]["content"] == "7"
    assert ep.task.last_thread != threading.main_thread().name  # sync tools run off the loop


async def test_no_tool_call_gets_a_user_message_and_counts_a_turn(runtime):
    ep = runtime.episode(0)
    await ep.start()
    out = await ep.step([{"role": "assistant", "content": "I think it is 5"}])
    assert out.messages == [{"role": "user", "content": out.messages[0]["content"]}]
    assert "No tool call" in out.messages[0]["content"] and out.metric["turns"] == 1


async def test_turn_limit_truncates_with_zero_reward_and_tears_down_once(runtime):
    ep = runtime.episode(1)
    await ep.start()
    before = len(Calc.teardowns)
    for _ in range(Calc.max_turns - 1):
        assert not (await ep.step([call("add", '{"x": 1}')])).finish
    out = await ep.step([call("add", '{"x": 1}')])
    assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0
    assert len(Calc.teardowns) == before + 1
    with pytest.raises(SessionFinishedError):
        await ep.step([call("add", '{"x": 1}')])
    await ep.close()
    assert len(Calc.teardowns) == before + 1


async def test_correct_answer_completes_and_stops_at_the_finishing_call(runtime):
    ep = runtime.episode(1)
    await ep.start()
    msg = {
        "role": "assistant",
        "tool_calls": [call("answer", '{"value": 6}', "a")["tool_calls"][0], call("add", '{"x": 1}', "b")["tool_calls"][0]],
    }
    out = await ep.step([msg])
    assert out.finish and out.status == SampleStatus.COMPLETED and out.reward == 1.0
    assert [m["tool_call_id"] for m in out.messages] == ["a"]


async def test_task_bug_ends_episode_as_task_error_not_model_failure(runtime):
    ep = runtime.episode(0)
    await ep.start()
    out = await ep.step([call("explode", "{}")])
    assert out.finish and out.status == SampleStatus.TASK_ERROR and out.status.is_infrastructure_failure
    assert "boom" in out.metric["error"]


def test_unknown_split_and_sample_are_clear_errors():
    with pytest.raises(DataError, match="no split 'test'"):
        TaskRuntime(Calc, split="test")
    with pytest.raises(UnknownSampleError, match="no sample 7"):
        TaskRuntime(Calc, split="dev").episode(7)


async def test_opening_assistant_turns_keep_their_content_key_on_the_wire():
    """A few-shot assistant turn that only calls tools leaves with ``content: null``, not without
    the key (agentrl-eval's Responses converter indexes ``message["content"]``)."""

    class FewShot(Calc):
        async def setup(self):
            example = {"id": "ex0", "type": "function", "function": {"name": "add", "arguments": '{"x": 1}'}}
            return [
                {"role": "user", "content": "What is 1 + 0?"},
                {"role": "assistant", "content": None, "tool_calls": [example]},
                {"role": "tool", "tool_call_id": "ex0", "content": "1"},
                *(await super().setup()),
            ]

    out = await TaskRuntime(FewShot, split="dev").episode(0).start()
    assistant = out.messages[1]
    assert assistant["role"] == "assistant" and "content" in assistant and assistant["content"] is None
    assert assistant["tool_calls"][0]["id"] == "ex0"
    assert "tool_calls" not in out.messages[0] and "tool_call_id" not in out.messages[0]  # no other null keys


async def test_echo_k_ends_at_its_kth_echo_for_load_generators():
    from agentrl_envs.tasks.echo import EchoConfig, EchoTask

    runtime = TaskRuntime(EchoTask, split="load", config=EchoConfig(steps=3))
    assert len(runtime.indices) == 100
    episode = runtime.episode(99)
    await episode.start()
    outs = [await episode.step([call("echo", f'{{"text": "t{i}"}}')]) for i in range(3)]
    assert [o.finish for o in outs] == [False, False, True] and outs[-1].reward == 1.0
    assert outs[0].messages[0]["content"] == "t0"
