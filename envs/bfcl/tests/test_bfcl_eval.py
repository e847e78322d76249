"""``agentrl-envs eval --tasks bfcl`` against an OpenAI-compatible server: a chat-completions
endpoint that answers every request from BFCL's ground truth (the entry found by its first user
message), through the embedded controller and a bfcl worker. Every entry is solved, and the
report groups the categories and weighs the groups BFCL's way."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from agentrl_env_bfcl.categories import SINGLE_TURN
from agentrl_env_bfcl.reference import reference_messages
from fastapi import FastAPI, Request

from agentrl_envs import get_task
from agentrl_envs.eval import EvalConfig, evaluate, summarize
from agentrl_envs.eval.command import embedded_services
from agentrl_envs.stack import ServerThread


def ground_truth_server(split: str) -> FastAPI:
    """An OpenAI-compatible model that sends the reference's next message for the entry at hand."""
    scripts = {}
    for sample in get_task("bfcl").load_samples(split):
        first = sample["entry"]["question"][0][-1]["content"]
        scripts.setdefault(first, reference_messages(sample))
    app = FastAPI()
    asked: list[int] = []

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": "ground-truth", "object": "model", "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        messages = body["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        sent = sum(m["role"] == "assistant" for m in messages)
        script = scripts[first]
        message = script[sent] if sent < len(script) else {"role": "assistant", "content": "Done."}
        asked.append(len(body.get("tools") or []))
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {
            "id": f"c{len(asked)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "ground-truth",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    app.state.asked = asked
    return app


def _evaluate(split: str, limit: int) -> tuple[dict[str, Any], list[int]]:
    """The task's summary, and the number of tools of every request the server got."""
    app = ground_truth_server(split)
    server = ServerThread(app).start()
    try:
        config = EvalConfig(
            tasks=["bfcl"],
            split=split,
            limit=limit,
            base_url=[f"{server.url}/v1"],
            tool_choice="auto",
            max_turns=1000,
            progress=False,
        )
        with embedded_services(config) as ready:
            result = asyncio.run(evaluate(ready))
    finally:
        server.stop()
    return summarize(result)["tasks"]["bfcl"], app.state.asked


@pytest.mark.slow
def test_eval_against_an_openai_compatible_server_reports_bfcl_categories():
    # The multi-turn categories share their questions, so the server (which knows an entry by its
    # first user message) plays one at a time: miss_func, whose tools change over the wire.
    multi, tools = _evaluate("multi_turn_miss_func", 3)
    assert max(tools) > min(tools), "the held-back functions reach the model's requests"
    assert (multi["n"], multi["success_rate"], multi["category_score"]) == (3, 1.0, 1.0), multi["status_counts"]
    assert multi["categories"] == {"multi_turn_miss_func": {"n": 3, "success_rate": 1.0, "group": "multi_turn", "weight": 30.0}}
    # The collection interleaves its five categories: two entries of each.
    single, _ = _evaluate("non_live_python", 10)
    assert single["n"] == 10 and single["success_rate"] == 1.0, single["status_counts"]
    assert set(single["categories"]) == set(SINGLE_TURN)
    assert all(c["n"] == 2 and c["success_rate"] == 1.0 for c in single["categories"].values())
    assert {g: v["weight"] for g, v in single["groups"].items()} == {"non_live_ast": 10.0, "irrelevance": 10.0}
    assert single["category_score"] == 1.0
