"""Concurrent requests decoded together (BatchSampler, ChatService), with the real model."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from agentrl_envs.chat.errors import ContextLengthError
from agentrl_envs.models.server import create_app
from agentrl_envs.models.service import ChatService
from agentrl_envs.protocol.openai import FunctionDefinition, Message, ToolDefinition

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
    chat = ChatService(engine, max_batch=8, batch_wait_s=0.2)
    try:
        choices = ["required", None, None, "required"]
        together = [
            g
            for [g] in await asyncio.gather(
                *(
                    chat.complete(ask(q), [SQL_TOOL], max_tokens=24, temperature=0.0, tool_choice=c)
                    for q, c in zip(QUESTIONS, choices, strict=True)
                )
            )
        ]
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
    chat = ChatService(engine, max_batch=8, batch_wait_s=0.2)
    too_long = "word " * (engine.max_context + 10)
    ok, bad = await asyncio.gather(
        chat.complete(ask(QUESTIONS[2]), max_tokens=4, temperature=0.0),
        chat.complete(ask(too_long), max_tokens=4, temperature=0.0),
        return_exceptions=True,
    )
    assert isinstance(bad, ContextLengthError) and not isinstance(ok, Exception)
    chat.close()
    with pytest.raises(RuntimeError, match="closed"):
        await chat.complete(ask(QUESTIONS[2]), max_tokens=4)


async def test_the_server_answers_concurrent_requests_through_the_batching_engine(engine: Any) -> None:
    chat = ChatService(engine, max_batch=8, batch_wait_s=0.2)
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


# --------------------------------------------------------------------------- continuous batching


async def test_a_request_that_arrives_mid_decode_joins_the_running_batch(engine: Any) -> None:
    """B arrives while A decodes: B is admitted into A's batch (not queued behind it), finishes
    first, and both answers equal their solo, greedy ones."""
    from agentrl_envs.chat.sampling import BatchSampler

    sampler = BatchSampler(engine, max_batch=8, batch_wait_s=0.0)
    try:
        long_prompt = engine.encode_prompt(ask("Write a long story about a dragon and a knight."))
        short_prompt = engine.encode_prompt(ask(QUESTIONS[2]))
        a = asyncio.ensure_future(sampler.generate(long_prompt, 48, temperature=0.0))
        while sampler.generated_tokens == 0 and sampler.running == 0:
            await asyncio.sleep(0.01)
        while sampler.steps < 4:  # A is decoding
            await asyncio.sleep(0.01)
        b = await sampler.generate(short_prompt, 6, temperature=0.0)
        assert not a.done()  # B was answered while A still decoded: it joined, it did not wait
        a_result = await a
        assert sampler.batches == 2  # two admissions, one running batch
        assert sampler.steps < len(a_result.completion_ids) + len(b.completion_ids) - 1  # steps were shared
        assert (b.completion_ids, b.stop_reason) == (engine.generate_tokens(short_prompt, 6)[0], "length")
        assert a_result.completion_ids == engine.generate_tokens(long_prompt, 48)[0]
    finally:
        sampler.close()


async def test_seeded_sampling_gives_the_same_tokens_alone_and_in_a_batch(engine: Any) -> None:
    from agentrl_envs.chat.sampling import BatchSampler

    sampler = BatchSampler(engine, max_batch=8, batch_wait_s=0.2)
    try:
        prompts = [engine.encode_prompt(ask(q)) for q in QUESTIONS]
        together = await asyncio.gather(*(sampler.generate(p, 10, temperature=0.8, seed=11) for p in prompts))
        alone = engine.generate_tokens(prompts[1], 10, temperature=0.8, seed=11)
        assert together[1].completion_ids == alone[0]
        assert together[1].logprobs == pytest.approx(alone[1], abs=1e-3)
    finally:
        sampler.close()


async def test_the_prefix_cache_serves_the_next_turn_of_a_conversation(engine: Any) -> None:
    from agentrl_envs.chat.sampling import BatchSampler

    sampler = BatchSampler(engine, max_batch=4, batch_wait_s=0.0)
    try:
        first = engine.encode_prompt(ask(QUESTIONS[0]), [SQL_TOOL])
        one = await sampler.generate(first, 8, temperature=0.0)
        follow_up = first + one.completion_ids + engine.encode_prompt(ask("And now?"))[-5:]
        fresh = engine.generate_tokens(follow_up, 8)[0]
        two = await sampler.generate(follow_up, 8, temperature=0.0)
        # the finished row's context is reused: its prompt and every completion token it fed back
        reused = len(first) + len(one.completion_ids) - 1
        assert sampler.prefix_cache.hits == 1 and sampler.prefix_cache.reused_tokens == reused
        assert two.completion_ids == fresh
        # another question of the same task: the shared system prompt and tools come from the cache
        other = engine.encode_prompt(ask(QUESTIONS[1]), [SQL_TOOL])
        shared = next(i for i, (a, b) in enumerate(zip(other, follow_up, strict=False)) if a != b)
        three = await sampler.generate(other, 8, temperature=0.0)
        assert sampler.prefix_cache.hits == 2 and sampler.prefix_cache.reused_tokens == reused + shared
        assert three.completion_ids == engine.generate_tokens(other, 8)[0]
    finally:
        sampler.close()


def test_the_repetition_guard_stops_a_cycle_and_spares_varied_text() -> None:
    from agentrl_envs.chat.decode import DecodeRow

    def feed(tokens: list[int], window: int = 16) -> tuple[int, str | None]:
        row = DecodeRow([1], max_tokens=1000, repetition_window=window)
        for n, t in enumerate(tokens, 1):
            row._accept(t, 0.0, frozenset({0}))
            if row.done:
                return n, row.stop_reason
        return len(tokens), row.stop_reason

    assert feed([7] * 100) == (16, "repetition")  # one word over and over
    assert feed([5, 6, 7, 8] * 30) == (16, "repetition")  # a cycle of 4 within a window of 16
    assert feed([5, 6, 7, 8, 9] * 30) == (150, None)  # period 5 > 16 / 4: left alone
    assert feed(list(range(1, 200))) == (199, None)
    assert feed([7] * 100, window=0) == (100, None)


async def test_a_deadline_ends_a_completion_as_length(engine: Any) -> None:
    chat = ChatService(engine, max_batch=2, batch_wait_s=0.0, max_request_seconds=0.5, repetition_window=0)
    try:
        [g] = await chat.complete(ask("Write a long story about a dragon."), max_tokens=400, temperature=0.0)
        assert g.finish_reason == "length" and 0 < g.usage.completion_tokens < 400
    finally:
        chat.close()


async def test_n_choices_and_streamed_deltas_match_the_whole_answers(engine: Any) -> None:
    chat = ChatService(engine, max_batch=8, batch_wait_s=0.05)
    try:
        kwargs: dict[str, Any] = {"max_tokens": 24, "temperature": 0.9, "seed": 5, "n": 3}
        whole = await chat.complete(ask(QUESTIONS[2]), **kwargs)
        assert len(whole) == 3
        content = ["", "", ""]
        finish: list[str | None] = [None] * 3
        usage = None
        async for d in chat.stream(ask(QUESTIONS[2]), **kwargs):
            if d.content:
                assert finish[d.index] is None
                content[d.index] += d.content
            if d.finish_reason:
                finish[d.index] = d.finish_reason
            usage = d.usage or usage
        assert content == [g.message.content or "" for g in whole]
        assert finish == [g.finish_reason for g in whole]
        assert usage is not None and usage.completion_tokens == sum(g.usage.completion_tokens for g in whole)
        # tools offered: a forced call streams as one complete tool call, no content
        calls = []
        async for d in chat.stream(ask(QUESTIONS[0]), [SQL_TOOL], max_tokens=40, temperature=0.0, tool_choice="required"):
            assert not d.content
            calls += d.tool_calls or []
        [alone] = await chat.complete(ask(QUESTIONS[0]), [SQL_TOOL], max_tokens=40, temperature=0.0, tool_choice="required")
        assert [(c.function.name, c.function.arguments) for c in calls] == [
            (c.function.name, c.function.arguments) for c in alone.message.tool_calls or []
        ]
    finally:
        chat.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited")
@pytest.mark.parametrize("streamed", [False, True])
def test_a_sampler_whose_requester_loop_closed_mid_decode_closes_quietly(engine: Any, streamed: bool) -> None:
    """SIGTERM during an evaluation: ``asyncio.run`` closes its loop while a row still decodes,
    then the engine is closed. Answers (tokens, the final result, the closing error) have nobody
    to go to; posting them to the closed loop raised and turned the demo's exit 143 into 1."""
    from agentrl_envs.chat.sampling import BatchSampler

    sampler = BatchSampler(engine, max_batch=2, name="orphaned")
    prompt = engine.encode_prompt(ask(QUESTIONS[0]))
    seen: list[int] = []
    loop = asyncio.new_event_loop()

    async def submit() -> None:
        on_token = seen.append if streamed else None  # streamed: tokens go to the loop as they come
        asyncio.ensure_future(sampler.generate(prompt, 300, temperature=0.0, on_token=on_token))
        while sampler.running == 0:
            await asyncio.sleep(0.01)

    loop.run_until_complete(submit())
    loop.close()  # what an interrupted asyncio.run does
    if streamed:
        time.sleep(0.5)  # the sampler thread posts tokens to the closed loop meanwhile
    sampler.close()  # settles the orphaned row: nothing raised, here or on the sampler's thread
    assert not sampler._thread.is_alive()
