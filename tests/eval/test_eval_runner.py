"""evaluate(): scoring, retries, and keeping infrastructure failures out of the scores."""

from __future__ import annotations

import pytest

from agentrl_envs.eval import EvalConfig, evaluate, summarize
from agentrl_envs.eval.runner import assistant_message


def scripted(word: str, turn: int) -> tuple[str, str]:
    """apple, ember, maple: right at once; river: wrong then right; cloud: no tool call then right;
    stone: always wrong (truncated at max_turns)."""
    if word == "river" and turn == 0:
        return ("call", "rivers")
    if word == "cloud" and turn == 0:
        return ("say", '<b>I think</b> the answer is & "cloud"')
    if word == "stone":
        return ("call", "pebble")
    return ("call", word)


def config(controller_url: str, base_url: str, **overrides) -> EvalConfig:
    values = dict(
        tasks="echo", controller=controller_url, base_url=base_url, api_key="k", max_turns=3, concurrency=3,
        retry_backoff=0.001, sdk_max_retries=0, progress=False,
    )  # fmt: skip
    values.update(overrides)
    return EvalConfig(**values)


async def test_scripted_run_summary(controller, model):
    fake_controller, url = controller
    fake_model, base_url = model(scripted)
    result = await evaluate(config(url, base_url, limit=6))

    assert result.model == "fake-model"  # taken from /v1/models
    assert [ep.index for ep in result.episodes] == [0, 1, 2, 3, 4, 5]
    by_index = {ep.index: ep for ep in result.episodes}
    assert [by_index[i].turns for i in range(6)] == [1, 2, 3, 2, 1, 1]
    assert by_index[2].status == "task limit reached" and by_index[2].reward == 0.0
    assert all(ep.attempts == 1 and ep.infra_error is None for ep in result.episodes)

    s = summarize(result)
    echo = s["tasks"]["echo"]
    assert echo["n"] == 6 and echo["infra_failures"] == 0
    assert echo["success_rate"] == pytest.approx(5 / 6)
    assert echo["avg_reward"] == pytest.approx(5 / 6)
    assert echo["avg_turns"] == pytest.approx(10 / 6)
    assert echo["status_counts"] == {"completed": 5, "task limit reached": 1}
    assert s["overall"]["success_rate"] == pytest.approx(5 / 6)
    # the truncated session was cancelled, the finished ones were not
    assert len(fake_controller.cancelled) == 1 and not fake_controller.sessions

    # the model saw native tools and the whole history, with tool-call arguments as raw JSON strings
    last = fake_model.requests[-1]
    assert last["tools"][0]["function"]["name"] == "echo"
    assert last["temperature"] == 0 and last["max_tokens"] == 256
    river = by_index[1].messages
    assert [m["role"] for m in river] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert river[2]["tool_calls"][0]["function"]["arguments"] == '{"text": "rivers"}'
    assert by_index[3].messages[3] == {"role": "user", "content": by_index[3].messages[3]["content"]}


async def test_injected_infrastructure_failures_are_retried_and_not_scored(controller, model):
    fake_controller, url = controller
    fake_model, base_url = model()
    fake_controller.start_failures = {0: 1}  # the first start_sample of index 0 answers 503
    fake_controller.capacity_failures = 2  # then two starts answer 406 (waited out, no retry used)
    fake_model.fail_on = {("river", 0)}  # one model API failure (HTTP 500)
    result = await evaluate(config(url, base_url, limit=4, concurrency=1))

    by_index = {ep.index: ep for ep in result.episodes}
    assert all(ep.scored and ep.success for ep in result.episodes)
    assert by_index[0].attempts == 2 and fake_controller.starts[0] == 4  # 503, 406, 406, ok
    assert by_index[1].attempts == 2  # restarted from scratch after the model failure...
    assert by_index[1].messages[2]["role"] == "assistant" and len(by_index[1].messages) == 4  # ...with a clean history
    assert by_index[2].attempts == 1 and by_index[3].attempts == 1
    assert fake_controller.cancelled  # the session the model failure left open was cancelled
    assert not fake_controller.sessions
    echo = summarize(result)["tasks"]["echo"]
    assert echo["success_rate"] == 1.0 and echo["infra_failures"] == 0 and echo["n"] == 4


async def test_persistent_infrastructure_failures_are_excluded_and_counted(controller, model):
    fake_controller, url = controller
    _, base_url = model(scripted)
    fake_controller.start_failures = {4: -1}  # never starts
    fake_controller.task_error_indices = {0}  # always ends "task error"
    result = await evaluate(config(url, base_url, limit=6, max_retries=2))

    by_index = {ep.index: ep for ep in result.episodes}
    assert by_index[4].infra_error and "NoWorkerError" in by_index[4].infra_error
    assert by_index[0].infra_error and "task error" in by_index[0].infra_error
    assert by_index[0].status == "task error" and by_index[0].attempts == 3
    assert fake_controller.starts[4] == 3  # 1 try + max_retries
    assert not by_index[0].success and not by_index[0].scored

    s = summarize(result)
    echo = s["tasks"]["echo"]
    # scored: 1 (river, ok), 2 (stone, fails), 3 (cloud, ok), 5 (maple, ok)
    assert echo["n"] == 4 and echo["n_episodes"] == 6 and echo["infra_failures"] == 2
    assert echo["success_rate"] == pytest.approx(3 / 4)
    assert echo["avg_reward"] == pytest.approx(3 / 4)
    assert echo["status_counts"] == {"completed": 3, "task limit reached": 1}
    assert s["overall"]["infra_failures"] == 2 and s["overall"]["n"] == 4


async def test_context_overflow_is_the_models_failure_not_retried(controller, model):
    fake_controller, url = controller
    fake_model, base_url = model()
    fake_model.context_overflow = {"river"}
    result = await evaluate(config(url, base_url, limit=2))
    river = result.episodes[1]
    assert (river.status, river.reward, river.scored, river.attempts) == ("agent context limit", 0.0, True, 1)
    assert fake_controller.starts[1] == 1 and len(fake_controller.cancelled) == 1
    assert summarize(result)["tasks"]["echo"]["success_rate"] == 0.5


async def test_all_episodes_failing_gives_null_rates(controller, model):
    fake_controller, url = controller
    _, base_url = model()
    fake_controller.start_failures = {0: -1, 1: -1}
    result = await evaluate(config(url, base_url, limit=2, max_retries=0))
    s = summarize(result)
    assert s["tasks"]["echo"]["n"] == 0 and s["tasks"]["echo"]["success_rate"] is None
    assert s["overall"]["success_rate"] is None and s["overall"]["infra_failures"] == 2


async def test_explicit_model_name_and_seed_are_sent(controller, model):
    _, url = controller
    fake_model, base_url = model()
    result = await evaluate(config(url, base_url, limit=1, model="my-model", seed=7, max_tokens=32, temperature=0.5))
    assert result.model == "my-model"
    request = fake_model.requests[0]
    assert (request["model"], request["seed"], request["max_tokens"], request["temperature"]) == ("my-model", 7, 32, 0.5)
    assert "tool_choice" not in request  # not sent unless asked for


async def test_tool_choice_is_sent_with_the_tools_when_given(controller, model):
    _, url = controller
    fake_model, base_url = model()
    await evaluate(config(url, base_url, limit=1, tool_choice="required"))
    assert fake_model.requests and all(r["tool_choice"] == "required" and r["tools"] for r in fake_model.requests)
    with pytest.raises(ValueError, match="tool_choice"):
        config(url, base_url, tool_choice="sometimes")


def test_assistant_message_keeps_raw_arguments_and_none_content():
    from openai.types.chat import ChatCompletionMessage

    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{bad json"}}],
        }
    )
    assert assistant_message(message) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{bad json"}}],
    }


def test_config_validation():
    assert EvalConfig(tasks="db, os,db").tasks == ["db", "os"]
    with pytest.raises(ValueError, match="tasks"):
        EvalConfig(tasks="")
    with pytest.raises(ValueError, match="concurrency"):
        EvalConfig(tasks="db", concurrency=0)


def test_assistant_turns_that_only_call_tools_go_to_the_api_with_string_content():
    from agentrl_envs.eval.runner import ChatPolicy

    policy = ChatPolicy(oai=None, model="m", config=EvalConfig(tasks=["echo"]))  # type: ignore[arg-type]
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call]},  # no content key (as a worker may send it)
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "content": "done"},
    ]
    sent = policy.request(messages, [])["messages"]
    assert [m.get("content") for m in sent] == ["hi", "", "ok", "", "done"]
    assert messages[1] == {"role": "assistant", "tool_calls": [call]}  # the episode's record is untouched
