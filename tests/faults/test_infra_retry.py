"""A controller restart seen by the episode runners: ``agentrl-envs eval`` retries the samples
whose sessions were lost (410 session_lost) and scores them; the trainer's rollout marks such an
episode an infrastructure failure (dropped from its group, never scored 0).

Real controller and worker processes; the policy is a scripted OpenAI-compatible model served
on loopback, held mid-episode while the controller restarts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import threading
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fault_stack import wait_until

from agentrl_envs.eval import EvalConfig, evaluate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WORD_RE = re.compile(r"Echo the word '(\w+)'")
WRONG_TURNS = 2  # the scripted policy echoes a wrong word twice, then the asked one


class GatedModel:
    """Echo policy over the chat-completions API. Until ``gate`` is set, a request after an
    episode's first turn waits (``waiting`` counts them): episodes are held mid-way."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waiting = 0
        self.app = FastAPI()

        @self.app.get("/v1/models")
        async def models() -> Any:
            return {"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "test"}]}

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if turn >= 1 and not self.gate.is_set():
                self.waiting += 1
                while not self.gate.is_set():
                    await asyncio.sleep(0.02)
                self.waiting -= 1
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            word = WORD_RE.search(user).group(1)
            text = word if turn >= WRONG_TURNS else "nope"
            call = {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": "echo", "arguments": json.dumps({"text": text})},
            }
            return {
                "id": f"chatcmpl-{turn}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }


@pytest.fixture
def gated_model():
    model = GatedModel()
    server = uvicorn.Server(uvicorn.Config(model.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "the scripted model serves")
    port = server.servers[0].sockets[0].getsockname()[1]
    yield model, f"http://127.0.0.1:{port}/v1"
    model.gate.set()
    server.should_exit = True
    thread.join(10)


def test_eval_retries_and_scores_samples_lost_to_a_controller_restart(faults, gated_model, caplog):
    model, base_url = gated_model
    stack = faults()
    worker = stack.add_worker()
    config = EvalConfig(
        tasks=["echo"], controller=stack.url, base_url=[base_url], concurrency=8, max_retries=2, retry_backoff=0.1, progress=False
    )
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["eval"] = asyncio.run(evaluate(config))
        except BaseException as e:  # noqa: BLE001 - re-raised below
            result["error"] = e

    caplog.set_level(logging.WARNING, logger="agentrl_envs")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        # All 8 episodes started on the first run of the controller and played a turn; they wait.
        wait_until(lambda: model.waiting == 8, 60, "every episode is held after its first turn")
        assert len(stack.list_sessions()) == 8
        stack.kill(stack.controller, signal.SIGKILL)
        stack.start_controller()
        stack.wait_live(worker, timeout=30)
    finally:
        model.gate.set()
        thread.join(120)
    assert not thread.is_alive() and "error" not in result, result
    episodes = result["eval"].episodes
    assert len(episodes) == 8
    for ep in episodes:  # each lost its first session, was retried from scratch, and was scored
        assert ep.scored and ep.success and ep.status == "completed" and ep.reward == 1.0, ep
        assert ep.attempts == 2 and ep.turns == WRONG_TURNS + 1, ep
    lost = [
        r.getMessage() for r in caplog.records if r.name == "agentrl_envs.eval.runner" and "attempt 1/3 failed" in r.getMessage()
    ]
    assert len(lost) == 8 and all("SessionLostError" in m and "restarted" in m for m in lost), lost
    assert stack.list_sessions() == []
    wait_until(lambda: stack.worker_current(worker) == 0, 30, "the worker holds no orphaned session")


class GatedEngine:
    """A rollout engine (no model): echoes a wrong word, then the asked one; from the second turn
    on it waits for ``gate`` (``waiting`` counts the held turns)."""

    version = 0

    def __init__(self, tokenizer: Any, stop_id: int) -> None:
        self.tokenizer = tokenizer
        self.stop_id = stop_id
        self.gate = threading.Event()
        self.waiting = 0

    async def generate(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float, tools: Any = None, seed: Any = None
    ) -> Any:
        from agentrl_trainer.rollout import TurnSample

        prompt = self.tokenizer.decode(prompt_ids)
        turn = prompt.count("<|im_start|>assistant") - 1  # the prompt ends with the opened turn
        if turn >= 1 and not self.gate.is_set():
            self.waiting += 1
            while not self.gate.is_set():
                await asyncio.sleep(0.02)
            self.waiting -= 1
        word = WORD_RE.search(prompt).group(1)
        text = word if turn >= WRONG_TURNS else "nope"
        call = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": text}}) + "\n</tool_call>"
        ids = list(self.tokenizer(call, add_special_tokens=False)["input_ids"]) + [self.stop_id]
        return TurnSample(ids, [-1.0] * len(ids), self.version)


def test_the_trainer_rollout_drops_episodes_lost_to_a_controller_restart(faults):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from agentrl_envs.chat.loading import model_directory
    from agentrl_envs.client import AsyncControllerClient
    from agentrl_trainer.pipeline import GroupBuffer
    from agentrl_trainer.rollout import EngineChoice, EpisodeSpec, RolloutSettings, run_episode

    tokenizer = AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = GatedEngine(tokenizer, stop_id)
    stack = faults()
    worker = stack.add_worker()
    settings = RolloutSettings(max_tokens=64, max_turns=10)

    async def group(gid: int) -> list[Any]:
        async with AsyncControllerClient(stack.url) as client:
            specs = [EpisodeSpec("echo", 3, gid, gid * 4 + i) for i in range(4)]
            choice = EngineChoice(engine, 0, False)
            return list(
                await asyncio.gather(*(run_episode(client, s, lambda _: choice, tokenizer, [stop_id], settings) for s in specs))
            )

    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(first=asyncio.run(group(0))), daemon=True)
    thread.start()
    try:
        wait_until(lambda: engine.waiting == 4, 60, "every episode is held after its first turn")
        stack.kill(stack.controller, signal.SIGKILL)
        stack.start_controller()
        stack.wait_live(worker, timeout=30)
    finally:
        engine.gate.set()
        thread.join(60)
    lost = result["first"]
    for ep in lost:  # an infrastructure failure, not a 0 reward
        assert ep.infra_failure and ep.reward == 0 and "SessionLostError" in ep.error, ep
    again = asyncio.run(group(1))  # the same sample, played on the new run of the controller
    assert all(not ep.infra_failure and ep.completed and ep.reward == 1.0 for ep in again), again

    buffer = GroupBuffer(group_size=4, min_valid=2)
    assert [buffer.add(ep) for ep in lost] == [None] * 4 and buffer.discarded == 1  # dropped, never scored
    complete = [g for g in (buffer.add(ep) for ep in again) if g is not None]
    assert len(complete) == 1 and len(complete[0].episodes) == 4 and complete[0].dropped == 0
    wait_until(lambda: stack.worker_current(worker) == 0, 30, "the worker holds no orphaned session")


def test_the_trainer_pipeline_replays_episodes_lost_to_a_controller_restart(faults):
    """What the pipeline runs (run_episode_retrying): an episode lost to the restart is played
    again from the start on the new controller and comes back completed, attempts == 2."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from agentrl_envs.chat.loading import model_directory
    from agentrl_envs.client import AsyncControllerClient
    from agentrl_trainer.rollout import EngineChoice, EpisodeSpec, RolloutSettings, run_episode_retrying

    tokenizer = AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = GatedEngine(tokenizer, stop_id)
    stack = faults()
    worker = stack.add_worker()
    settings = RolloutSettings(max_tokens=64, max_turns=10, infra_retries=2)

    async def group() -> list[Any]:
        async with AsyncControllerClient(stack.url) as client:
            choice = EngineChoice(engine, 0, False)
            specs = [EpisodeSpec("echo", 3, 0, i) for i in range(4)]
            return list(
                await asyncio.gather(
                    *(run_episode_retrying(client, s, lambda _: choice, tokenizer, [stop_id], settings) for s in specs)
                )
            )

    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(eps=asyncio.run(group())), daemon=True)
    thread.start()
    try:
        wait_until(lambda: engine.waiting == 4, 60, "every episode is held after its first turn")
        stack.kill(stack.controller, signal.SIGKILL)
        stack.start_controller()
        stack.wait_live(worker, timeout=30)
    finally:
        engine.gate.set()
        thread.join(120)
    eps = result["eps"]
    assert all(ep.attempts == 2 and not ep.infra_failure and ep.completed and ep.reward == 1.0 for ep in eps), eps
    wait_until(lambda: stack.worker_current(worker) == 0, 30, "the worker holds no orphaned session")
