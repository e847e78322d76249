"""The OpenAI-compatible app: a fake engine for the HTTP contract, the real model via the openai SDK."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from agentrl_envs.models.server import create_app
from agentrl_envs.models.toolcalls import parse_completion
from agentrl_envs.schema import FunctionDefinition, Message, ToolDefinition, Usage

SQL_TOOL = {
    "type": "function",
    "function": {
        "name": "execute_sql",
        "description": "Run one SQL query on the database.",
        "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    },
}


class FakeEngine:
    """Answers with a fixed completion text; records the arguments of the last call."""

    name = "fake-model"

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[dict[str, Any]] = []

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tool_choice: Any = None,
    ) -> tuple[Message, str, Usage]:
        self.calls.append(
            {
                "messages": messages,
                "tools": tools,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": seed,
                "tool_choice": tool_choice,
            }
        )
        message = parse_completion(self.text).to_message()
        finish = "tool_calls" if message.tool_calls else "stop"
        return (message, finish, Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15))


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
    assert body["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}
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
        ({"stream": True}, 400, "invalid_request"),
        ({"n": 2}, 400, "invalid_request"),
        ({"max_tokens": 0}, 400, "invalid_request"),
        ({"temperature": 5}, 400, "invalid_request"),
        ({"messages": []}, 400, "invalid_request"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 422, "invalid_request"),
    ],
)
async def test_errors_have_one_shape(extra: dict[str, Any], status: int, error: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    async with client_for(FakeEngine("x")) as c:
        r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == status
    assert r.json()["error"] == error and isinstance(r.json()["detail"], str)
    if extra.get("stream"):
        assert "stream" in r.json()["detail"]


# --------------------------------------------------------------------------- the real model


@pytest.mark.model
async def test_openai_sdk_against_the_real_model_in_process(engine: Any) -> None:
    openai = pytest.importorskip("openai")
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://model/v1")
    async with openai.AsyncOpenAI(base_url="http://model/v1", api_key="none", http_client=http) as client:
        messages = [{"role": "user", "content": "List the tables of the database."}]
        r = await client.chat.completions.create(
            model="anything", messages=messages, tools=[SQL_TOOL], max_tokens=40, temperature=0
        )
        models = await client.models.list()
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
