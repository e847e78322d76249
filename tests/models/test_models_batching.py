"""Concurrent requests decoded together (BatchSampler, BatchedChat), with the real model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from agentrl_envs.models.batching import BatchedChat
from agentrl_envs.models.errors import ContextLengthError
from agentrl_envs.models.server import create_app
from agentrl_envs.schema import FunctionDefinition, Message, ToolDefinition

pytest.importorskip("torch")

SQL_TOOL = ToolDefinition(
    function=FunctionDefinition(
        name="execute_sql",
        description="Run one SQL query on the database.",
        parameters={"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    )
)
QUESTIONS = [
    "Table employees(id, name). How many employees are there?",
    "Table orders(id, total). What is the largest total?",
    "Name a color.",
    "Table cities(name, country). List the cities in France.",
]


def ask(question: str) -> list[Message]:
    return [Message(role="user", content=question)]


def same_answer(a: Message, b: Message) -> bool:
    """Equal but for the tool-call ids (random per answer)."""
    calls = [[(c.function.name, c.function.arguments) for c in m.tool_calls or []] for m in (a, b)]
    return a.content == b.content and calls[0] == calls[1]


async def test_concurrent_requests_decode_in_one_batch_and_answer_as_they_would_alone(engine: Any) -> None:
    chat = BatchedChat(engine, max_batch=8, batch_wait_s=0.2)
    try:
        choices = ["required", None, None, "required"]
        together = await asyncio.gather(
            *(
                chat.agenerate(ask(q), [SQL_TOOL], max_tokens=24, temperature=0.0, tool_choice=c)
                for q, c in zip(QUESTIONS, choices, strict=True)
            )
        )
        assert chat.sampler.batches < len(QUESTIONS)  # decoded together, not one by one
        for q, c, got in zip(QUESTIONS, choices, together, strict=True):
            alone = engine.generate(ask(q), [SQL_TOOL], max_tokens=24, temperature=0.0, tool_choice=c)
            assert same_answer(got.message, alone.message) and got.finish_reason == alone.finish_reason
            assert got.usage == alone.usage
        for got, c in zip(together, choices, strict=True):
            if c == "required" and got.finish_reason == "tool_calls":
                assert json.loads(got.message.tool_calls[0].function.arguments).keys() == {"sql"}
        assert chat.sampler.generated_tokens == sum(g.usage.completion_tokens for g in together)
        assert chat.sampler.busy_seconds > 0
    finally:
        chat.close()


async def test_a_prompt_too_long_fails_alone_and_a_closed_sampler_refuses(engine: Any) -> None:
    chat = BatchedChat(engine, max_batch=8, batch_wait_s=0.2)
    too_long = "word " * (engine.max_context + 10)
    ok, bad = await asyncio.gather(
        chat.agenerate(ask(QUESTIONS[2]), max_tokens=4, temperature=0.0),
        chat.agenerate(ask(too_long), max_tokens=4, temperature=0.0),
        return_exceptions=True,
    )
    assert isinstance(bad, ContextLengthError) and not isinstance(ok, Exception)
    chat.close()
    with pytest.raises(RuntimeError, match="closed"):
        await chat.agenerate(ask(QUESTIONS[2]), max_tokens=4)


async def test_the_server_answers_concurrent_requests_through_the_batching_engine(engine: Any) -> None:
    chat = BatchedChat(engine, max_batch=8, batch_wait_s=0.2)
    transport = httpx.ASGITransport(app=create_app(chat))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://model", timeout=120) as http:
            tool = SQL_TOOL.model_dump(mode="json", exclude_none=True)
            bodies = [  # one task's requests: the same tools, so the same prompt head (sampled together)
                {"messages": [{"role": "user", "content": q}], "tools": [tool], "max_tokens": 8, "temperature": 0}
                for q in QUESTIONS
            ]
            responses = await asyncio.gather(*(http.post("/v1/chat/completions", json=b) for b in bodies))
        assert [r.status_code for r in responses] == [200] * len(QUESTIONS)
        assert all(r.json()["usage"]["completion_tokens"] <= 8 for r in responses)
        assert chat.sampler.batches < len(QUESTIONS)
    finally:
        chat.close()
