"""The OpenAI-compatible app: a fake engine for the HTTP contract, the real model via the openai SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from agentrl_envs.chat.engine import ChatGeneration
from agentrl_envs.chat.toolcalls import parse_completion
from agentrl_envs.models.server import create_app
from agentrl_envs.models.service import ChatService, StreamDelta
from agentrl_envs.protocol.openai import FunctionDefinition, Message, ToolDefinition, Usage

SQL_TOOL = {
    "type": "function",
    "function": {
        "name": "execute_sql",
        "description": "Run one SQL query on the database.",
        "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    },
}


class FakeEngine:
    """A chat backend that answers with a fixed completion text; records each call's arguments."""

    name = "fake-model"

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[dict[str, Any]] = []

    def _answer(self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None, **kwargs: Any) -> ChatGeneration:
        self.calls.append({"messages": messages, "tools": tools, **kwargs})
        message = parse_completion(self.text).to_message()
        finish = "tool_calls" if message.tool_calls else "stop"
        return ChatGeneration(message, finish, Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15))

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None, **kwargs: Any
    ) -> list[ChatGeneration]:
        return [self._answer(messages, tools, **kwargs) for _ in range(kwargs.get("n", 1))]

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None, **kwargs: Any
    ) -> AsyncIterator[StreamDelta]:
        generations = await self.complete(messages, tools, **kwargs)
        for i, g in enumerate(generations):
            text = g.message.content or ""
            for k in range(0, len(text), 3):  # a few characters at a time, as tokens would come
                yield StreamDelta(index=i, content=text[k : k + 3])
            if g.message.tool_calls:
                yield StreamDelta(index=i, tool_calls=g.message.tool_calls)
            yield StreamDelta(index=i, finish_reason=g.finish_reason)
        yield StreamDelta(
            usage=Usage(prompt_tokens=10, completion_tokens=5 * len(generations), total_tokens=10 + 5 * len(generations))
        )


def client_for(engine: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://model")


async def test_health_and_models() -> None:
    async with client_for(FakeEngine("hi")) as c:
        assert (await c.get("/health")).json() == {"status": "ok", "model": "fake-model"}
        data = (await c.get("/v1/models")).json()
        assert data["object"] == "list" and data["data"][0]["id"] == "fake-model"


async def test_text_completion_shape() -> None:
    engine = FakeEngine("Hello!")
    async with client_for(engine) as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7, "seed": 1},
        )
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "fake-model"
    assert body["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "Hello!", "refusal": None},
        "finish_reason": "stop",
        "logprobs": None,
    }
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert engine.calls[0]["max_tokens"] == 7 and engine.calls[0]["temperature"] == 1.0 and engine.calls[0]["seed"] == 1


async def test_tool_calls_come_back_with_finish_reason_tool_calls() -> None:
    engine = FakeEngine('<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>')
    async with client_for(engine) as c:
        r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}], "tools": [SQL_TOOL]})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "execute_sql", "arguments": '{"sql": "SELECT 1"}'}
    assert engine.calls[0]["tools"][0].function.name == "execute_sql"


async def test_tool_choice_none_hides_the_tools() -> None:
    engine = FakeEngine("ok")
    async with client_for(engine) as c:
        await c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "q"}], "tools": [SQL_TOOL], "tool_choice": "none"},
        )
    assert engine.calls[0]["tools"] is None and engine.calls[0]["tool_choice"] is None


async def test_tool_choice_is_passed_on_with_tools() -> None:
    engine = FakeEngine("ok")
    async with client_for(engine) as c:
        await c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "q"}], "tools": [SQL_TOOL], "tool_choice": "required"},
        )
    assert engine.calls[0]["tool_choice"] == "required"


@pytest.mark.parametrize(
    ("extra", "status", "error"),
    [
        ({"n": 0}, 400, "bad_request"),
        ({"n": 17}, 400, "bad_request"),
        ({"logprobs": True}, 400, "bad_request"),
        ({"stop": ["\n"]}, 400, "bad_request"),
        ({"response_format": {"type": "json_object"}}, 400, "bad_request"),
        ({"tool_choice": "required"}, 400, "bad_request"),
        ({"tool_choice": "sometimes", "tools": [SQL_TOOL]}, 400, "bad_request"),
        ({"max_tokens": 0}, 400, "bad_request"),
        ({"temperature": 5}, 400, "bad_request"),
        ({"messages": []}, 400, "bad_request"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 422, "invalid_request"),
    ],
)
async def test_errors_have_one_shape(extra: dict[str, Any], status: int, error: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    async with client_for(FakeEngine("x")) as c:
        r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == status
    assert r.json()["error"] == error and isinstance(r.json()["detail"], str)
    if status == 400:
        assert r.json()["data"].get("param") in extra or "messages" in extra


# --------------------------------------------------------------------------- the real model


@pytest.mark.model
async def test_openai_sdk_against_the_real_model_in_process(engine: Any) -> None:
    service = ChatService(engine)
    try:
        async with sdk_for(service) as client:
            messages = [{"role": "user", "content": "List the tables of the database."}]
            r = await client.chat.completions.create(
                model="anything", messages=messages, tools=[SQL_TOOL], max_tokens=40, temperature=0
            )
            models = await client.models.list()
            # the same question through the Responses API, with agentrl-eval's budget (capped server-side)
            resp = await client.responses.create(
                model="anything",
                input=messages[0]["content"],
                tools=[{"type": "function", **SQL_TOOL["function"]}],
                tool_choice="required",
                max_output_tokens=16000,
                temperature=0,
            )
    finally:
        service.close()
    calls = [item for item in resp.output if item.type == "function_call"]
    assert resp.status == "completed" and [c.name for c in calls] == ["execute_sql"]
    assert json.loads(calls[0].arguments).keys() == {"sql"}
    assert 0 < resp.usage.output_tokens <= service.max_tokens_limit
    assert models.data[0].id == "SmolLM2-135M-Instruct"
    assert r.model == "SmolLM2-135M-Instruct"
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls)
    for call in choice.message.tool_calls or []:
        assert isinstance(call.function.arguments, str)
    expected_prompt = engine.encode_prompt(
        [Message(role="user", content=messages[0]["content"])],
        [ToolDefinition(function=FunctionDefinition(**SQL_TOOL["function"]))],
    )
    assert r.usage.prompt_tokens == len(expected_prompt)
    assert 0 < r.usage.completion_tokens <= 40
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    json.dumps(r.model_dump())  # the SDK's objects are plain data


# --------------------------------------------------------------------------- n, streaming, responses


def sdk_for(backend: Any) -> Any:
    openai = pytest.importorskip("openai")
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(backend)), base_url="http://model/v1")
    return openai.AsyncOpenAI(base_url="http://model/v1", api_key="none", http_client=http)


async def test_n_choices_through_the_sdk() -> None:
    async with sdk_for(FakeEngine("Hello!")) as client:
        r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=3)
    assert [c.index for c in r.choices] == [0, 1, 2] and {c.message.content for c in r.choices} == {"Hello!"}
    assert r.usage.prompt_tokens == 10 and r.usage.completion_tokens == 15  # the prompt once, every completion


async def test_streaming_through_the_sdk_reassembles_text_and_tool_calls() -> None:
    text = 'Let me look. <tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>'
    async with sdk_for(FakeEngine(text)) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "q"}],
            tools=[SQL_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
        content, calls, finish, usage, roles = "", {}, None, None, 0
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                roles += choice.delta.role == "assistant"
                content += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    entry["id"] = tc.id or entry["id"]
                    if tc.function is not None:
                        entry["name"] += tc.function.name or ""
                        entry["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
    assert roles == 1 and content == "Let me look."
    assert list(calls) == [0] and calls[0]["name"] == "execute_sql" and json.loads(calls[0]["arguments"]) == {"sql": "SELECT 1"}
    assert calls[0]["id"].startswith("call_")
    assert finish == "tool_calls" and usage is not None and usage.total_tokens == 15


async def test_responses_api_maps_items_to_chat_and_answers_in_its_shape() -> None:
    engine = FakeEngine('<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>')
    tool = {
        "type": "function",
        "name": "execute_sql",
        "description": "Run SQL.",
        "parameters": SQL_TOOL["function"]["parameters"],
    }
    history = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "How many rows?"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "execute_sql",
            "arguments": '{"sql": "x"}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "[(3,)]"}]},
    ]
    async with sdk_for(engine) as client:
        r = await client.responses.create(
            model="m",
            input=history,
            instructions="You answer with SQL.",
            tools=[tool],
            max_output_tokens=16000,
            temperature=0.8,
            truncation="auto",
        )
    sent = engine.calls[0]["messages"]
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[0].content == "You answer with SQL.\n\nBe brief."
    assert sent[2].content == "Checking." and sent[2].tool_calls[0].id == "call_1"
    assert sent[3].tool_call_id == "call_1" and sent[3].content == "[(3,)]"
    assert engine.calls[0]["max_tokens"] == 16000 and engine.calls[0]["temperature"] == 0.8
    assert r.status == "completed" and r.error is None
    [call] = r.output
    assert call.type == "function_call" and call.name == "execute_sql" and json.loads(call.arguments) == {"sql": "SELECT 1"}
    assert r.usage.input_tokens == 10 and r.usage.output_tokens == 5 and r.usage.total_tokens == 15


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"stream": True}, "stream"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
        ({"input": [{"type": "computer_call"}]}, "input"),
        ({"text": {"format": {"type": "json_schema"}}}, "text"),
    ],
)
async def test_responses_api_refuses_what_it_does_not_serve(extra: dict[str, Any], param: str) -> None:
    async with client_for(FakeEngine("x")) as c:
        r = await c.post("/v1/responses", json={"model": "m", "input": "hi", **extra})
    assert r.status_code == 400 and r.json()["error"] == "bad_request" and r.json()["data"]["param"] == param
