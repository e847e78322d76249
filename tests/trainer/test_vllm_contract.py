"""The real :class:`VLLMEngine` against a fake ``trl vllm-serve`` (TRL 1.16) on loopback.

The fake (``fake_vllm_server.py``) answers vLLM's routes with vLLM's fields; the NCCL broadcast
cannot run on a CPU, so the engine's :class:`WeightSender` is a recorder here. Each turn's
tokens carry the weight version they were sampled with, so a turn that spans a weight update
would show it. No vllm is imported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
import torch
from fake_vllm_server import FakeVLLM, fake_logprob, token_version
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentrl_envs import agent
from agentrl_envs.errors import ContextLimitError, InfrastructureError, ModelError, ModelServerError
from agentrl_envs.protocol.agentrl import InteractResponse, SampleStatus, StartSampleResponse
from agentrl_trainer.engines import VLLMEngine
from agentrl_trainer.engines.vllm import GRAMMAR_REFUSAL, VLLMEngineError, end_of_turn_token_ids

PROMPT = [5, 6, 7, 8]


def toy_tokenizer(end_of_turn: str = "<end_of_turn>") -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose chat template ends a turn with ``end_of_turn``, not with EOS."""
    vocab = {"<unk>": 0, "<eos>": 1, end_of_turn: 2, "<start_of_turn>": 3, "user": 4, "assistant": 5, "hi": 6}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", end_of_turn]})
    tok.chat_template = (
        "{% for m in messages %}<start_of_turn> {{ m['role'] }} {{ m['content'] }} " + end_of_turn + "\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn> assistant {% endif %}"
    )
    return tok


class RecordingSender:
    """Stands in for the NCCL broadcast: records what would be sent; ``hold`` blocks a send."""

    init_extra = {"packed": True}
    update_extra: dict[str, Any] = {}

    def __init__(self) -> None:
        self.opened: list[dict[str, Any]] = []
        self.sent: list[list[tuple[str, torch.Tensor]]] = []
        self.in_send = threading.Event()
        self.hold: threading.Event | None = None
        self.closed = False

    def open(self, init_info: dict[str, Any]) -> None:
        self.opened.append(dict(init_info))

    def send(self, named: Iterator[tuple[str, torch.Tensor]]) -> None:
        items = [(n, t.clone()) for n, t in named]
        self.in_send.set()
        if self.hold is not None:
            assert self.hold.wait(30)
        self.sent.append(items)

    def close(self) -> None:
        self.closed = True


class Loop:
    """An event loop on its own thread, as the rollout pipeline runs one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.submit(coro).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    server = FakeVLLM().start()
    yield server
    server.stop()


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


def open_engine(fake: FakeVLLM, **kwargs: Any) -> VLLMEngine:
    kwargs.setdefault("tokenizer", toy_tokenizer())
    kwargs.setdefault("sender", RecordingSender())
    return VLLMEngine(base_url=fake.url, group_port=51999, timeout=10, request_timeout=10, **kwargs)


async def turn(engine: VLLMEngine, prompt: list[int] = PROMPT, max_tokens: int = 16) -> tuple[list[int], list[float], int]:
    """One turn as the rollout plays it: its ids, logprobs and the version label it carries (the
    engine's ``version`` read in the same task agrees)."""
    out = await engine.generate(prompt, max_tokens, 1.0, 1.0)
    assert out.version == engine.version
    return out.ids, out.logprobs, out.version


def weights() -> dict[str, torch.Tensor]:
    return {
        "model.embed_tokens.weight": torch.arange(12, dtype=torch.float32).reshape(4, 3),
        "model.layers.0.mlp.up_proj.weight": torch.ones(3, 2, dtype=torch.bfloat16),
        "model.layers.0.input_layernorm.weight": torch.full((3,), 0.5, dtype=torch.float16),
        "model.norm.weight": torch.zeros(3),
        "lm_head.weight": torch.eye(3),
    }


# ---------------------------------------------------------------------------- start-up


def test_start_checks_the_server_and_joins_the_weight_group(fake: FakeVLLM) -> None:
    fake.world_size = 2
    engine = open_engine(fake)
    assert engine.model == fake.model and engine.max_model_len == fake.max_model_len
    [(what, info)] = [e for e in fake.events if e[0] == "init_weight_transfer_engine"]
    assert info == {"master_address": "127.0.0.1", "master_port": 51999, "rank_offset": 1, "world_size": 3, "packed": True}
    assert engine.sender.opened == [info]  # type: ignore[union-attr]
    engine.close()


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logits"])
def test_a_server_in_another_logprob_mode_is_refused(fake: FakeVLLM, mode: str) -> None:
    fake.logprobs_mode = mode
    with pytest.raises(VLLMEngineError, match=f"'{mode}' mode.*--logprobs-mode processed_logprobs"):
        open_engine(fake)
    assert "init_weight_transfer_engine" not in fake.names()


def test_a_server_without_dev_endpoints_or_weight_transfer_is_refused(fake: FakeVLLM) -> None:
    fake.weight_transfer = False
    with pytest.raises(VLLMEngineError, match="no weight-transfer engine"):
        open_engine(fake)
    open_engine(fake, sync_weights=False).close()  # generation only needs no weight transfer
    fake.dev_mode = False
    with pytest.raises(VLLMEngineError, match="VLLM_SERVER_DEV_MODE=1"):
        open_engine(fake)


@pytest.mark.parametrize("end_of_turn", ["<end_of_turn>", "<|im_end|>", "<|eot_id|>"])
def test_end_of_turn_token_comes_from_the_chat_template(end_of_turn: str) -> None:
    tok = toy_tokenizer(end_of_turn)
    assert tok.convert_tokens_to_ids(end_of_turn) == 2 and tok.eos_token_id == 1
    assert end_of_turn_token_ids(tok) == [1, 2]


# ---------------------------------------------------------------------------- generation


def test_generation_round_trip_aligns_tokens_and_logprobs(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    ids, logprobs, version = loop.run(turn(engine))
    [body] = fake.requests
    assert body["prompt"] == [PROMPT] and body["model"] == fake.model
    assert body["logprobs"] == 0 and body["return_token_ids"] is True and body["return_tokens_as_token_ids"] is True
    assert (body["top_k"], body["min_p"], body["repetition_penalty"], body["n"]) == (0, 0.0, 1.0, 1)
    assert len(ids) == fake.reply_tokens + 1 and ids[-1] == fake.eot_token_id
    assert logprobs == [fake_logprob(t) for t in ids]
    assert version == 0 and all(token_version(t) == 0 for t in ids[:-1])
    engine.close()


def test_fake_answers_parse_with_trls_own_client_code(fake: FakeVLLM) -> None:
    """The fake's bodies are what TRL 1.16's VLLMClient reads (its parser, without vllm)."""
    import httpx
    from trl.generation.vllm_client import parse_logprobs

    completion = {"model": fake.model, "prompt": [PROMPT], "max_tokens": 4, "logprobs": 0}
    completion |= {"return_token_ids": True, "return_tokens_as_token_ids": True}
    [choice] = httpx.post(f"{fake.url}/v1/completions", json=completion).json()["choices"]
    logprobs, ids = parse_logprobs([choice["logprobs"]])
    assert [i[0] for i in ids[0]] == choice["token_ids"] and [v[0] for v in logprobs[0]] == choice["logprobs"]["token_logprobs"]
    chat = {"model": fake.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "logprobs": True}
    answer = httpx.post(f"{fake.url}/v1/chat/completions", json=chat | {"top_logprobs": 0}).json()
    logprobs, ids = parse_logprobs([answer["choices"][0]["logprobs"]])
    assert [i[0] for i in ids[0]] == answer["choices"][0]["token_ids"] and len(answer["prompt_token_ids"]) == 2


def test_the_end_of_turn_token_is_sent_and_ends_the_turn(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    assert engine.stop_token_ids == [1, 2]
    ids, _, _ = loop.run(turn(engine))
    assert fake.requests[-1]["stop_token_ids"] == [1, 2] and ids[-1] == 2
    # the same model without the end-of-turn stop runs past the turn, to max_tokens
    bare = open_engine(fake, tokenizer=None)
    ids, _, _ = loop.run(turn(bare, max_tokens=12))
    assert len(ids) == 12 and ids[fake.reply_tokens] == 2
    engine.close(), bare.close()


def test_grammar_is_refused_before_any_request(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    tools = [{"type": "function", "function": {"name": "query", "parameters": {"type": "object"}}}]
    with pytest.raises(VLLMEngineError) as e:
        loop.run(engine.generate(PROMPT, 8, 1.0, 1.0, tools=tools))
    assert str(e.value) == GRAMMAR_REFUSAL and "logprobs" in GRAMMAR_REFUSAL
    assert fake.requests == []
    engine.close()


# ---------------------------------------------------------------------------- errors


def test_a_prompt_over_max_model_len_is_a_context_limit_and_max_tokens_is_cut(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    with pytest.raises(ContextLimitError, match="max_model_len is 64"):
        loop.run(engine.generate(list(range(64)), 8, 1.0, 1.0))
    assert fake.requests == []  # refused before it reached the server
    ids, _, _ = loop.run(turn(engine, prompt=[9] * 60, max_tokens=16))
    assert fake.requests[-1]["max_tokens"] == 4 and len(ids) == 4
    # a server that does not report max_model_len: its own 400 is classified the same way
    fake.report_max_model_len = False
    blind = open_engine(fake)
    with pytest.raises(ContextLimitError, match="maximum context length is 64"):
        loop.run(blind.generate([9] * 60, 16, 1.0, 1.0))
    assert issubclass(ContextLimitError, ModelError)
    engine.close(), blind.close()


@pytest.mark.parametrize("status", [500, 503])
def test_server_failures_are_infrastructure_failures(fake: FakeVLLM, loop: Loop, status: int) -> None:
    engine = open_engine(fake)
    fake.fail_next = [status]
    with pytest.raises(ModelServerError, match=f"HTTP {status}"):
        loop.run(engine.generate(PROMPT, 8, 1.0, 1.0))
    assert issubclass(ModelServerError, InfrastructureError)
    fake.fail_next = [422]  # a request the server refuses: a set-up error, not a lost episode
    with pytest.raises(VLLMEngineError, match="HTTP 422"):
        loop.run(engine.generate(PROMPT, 8, 1.0, 1.0))
    engine.close()


def test_a_dead_server_and_an_aborted_turn_are_infrastructure_failures(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    fake.token_delay_s = 0.02
    pending = loop.submit(engine.generate(PROMPT, 16, 1.0, 1.0))
    assert fake.generating.wait(10)
    import httpx

    httpx.post(f"{fake.url}/pause", params={"mode": "abort"})
    with pytest.raises(ModelServerError, match="aborted"):
        pending.result(10)
    fake.stop()
    with pytest.raises(ModelServerError, match="ConnectError"):
        loop.run(engine.generate(PROMPT, 8, 1.0, 1.0))
    engine.close()


class OneTurnSessions:
    """A session that asks for one assistant turn (the agent loop's transport)."""

    async def start_sample_when_free(
        self, task: str, index: Any, *, timeout: float, delay: Any
    ) -> tuple[int, StartSampleResponse]:
        return 1, StartSampleResponse(messages=[{"role": "user", "content": "hi"}], tools=[])

    async def interact(self, session_id: int, messages: list[dict[str, Any]]) -> InteractResponse:
        return InteractResponse(finish=True, reward=1.0, status=SampleStatus.COMPLETED)

    async def cancel_quietly(self, session_id: int) -> None:
        pass


class EnginePolicy:
    def __init__(self, engine: VLLMEngine, prompt: list[int]) -> None:
        self.engine, self.prompt = engine, prompt

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        out = await self.engine.generate(self.prompt, 16, 1.0, 1.0)
        return {"role": "assistant", "content": " ".join(map(str, out.ids))}


def test_the_agent_loop_scores_a_long_prompt_and_drops_a_dead_server(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)

    def play(prompt: list[int]) -> agent.Transcript:
        return loop.run(agent.run_episode(OneTurnSessions(), "t", 0, EnginePolicy(engine, prompt)))  # type: ignore[arg-type]

    assert play(PROMPT).outcome is agent.Outcome.SOLVED
    too_long = play(list(range(70)))
    assert too_long.status is SampleStatus.AGENT_CONTEXT_LIMIT and too_long.outcome is agent.Outcome.FAILED
    fake.stop()
    lost = play(PROMPT)
    assert lost.outcome is agent.Outcome.INFRA_FAILURE and "ModelServerError" in (lost.error or "")
    engine.close()


# ---------------------------------------------------------------------------- weights


def test_one_batched_update_per_publish(fake: FakeVLLM) -> None:
    engine = open_engine(fake)
    named = weights()
    engine.load_weights(named, 1)
    updates = [d for w, d in fake.events if w == "update_weights"]
    assert fake.names()[-6:] == [
        "pause",
        "start_weight_update",
        "update_weights",
        "finish_weight_update",
        "reset_prefix_cache",
        "resume",
    ]
    assert updates == [
        {
            "names": list(named),
            "dtype_names": ["float32", "bfloat16", "float16", "float32", "float32"],
            "shapes": [[4, 3], [3, 2], [3], [3], [3, 3]],
        }
    ]
    [sent] = engine.sender.sent  # type: ignore[union-attr]
    assert [n for n, _ in sent] == list(named) and all(torch.equal(t, named[n]) for n, t in sent)
    assert ("finish_weight_update", "1") in fake.events and ("pause", "wait") in fake.events
    engine.load_weights(named, 2)
    assert fake.names().count("update_weights") == 2 and len(engine.sender.sent) == 2  # type: ignore[union-attr]
    assert engine.version == 2 and engine.weight_updates == 2
    engine.close()


def test_a_weight_update_waits_for_turns_in_flight_and_holds_new_ones(fake: FakeVLLM, loop: Loop) -> None:
    """Turn A runs when the update starts, turn B arrives during it: neither mixes versions, and
    each is labelled with the version that generated it."""
    engine = open_engine(fake)
    sender: RecordingSender = engine.sender  # type: ignore[assignment]
    sender.hold = threading.Event()
    fake.token_delay_s = 0.03  # ~0.2 s a turn: the update arrives mid-turn
    a = loop.submit(turn(engine))
    assert fake.generating.wait(10)
    update = threading.Thread(target=engine.load_weights, args=(weights(), 1))
    update.start()
    assert sender.in_send.wait(10)  # the weights are on their way: A must be over
    ids_a, _, label_a = a.result(0)
    assert {token_version(t) for t in ids_a[:-1]} == {0} and label_a == 0
    assert fake.names().index("gen_end") < fake.names().index("pause")
    b = loop.submit(turn(engine))
    with pytest.raises(concurrent.futures.TimeoutError):  # not the builtin on Python 3.10
        b.result(0.2)  # held while the update runs
    assert fake.names().count("gen_start") == 1
    sender.hold.set()
    update.join(10)
    ids_b, _, label_b = b.result(10)
    assert {token_version(t) for t in ids_b[:-1]} == {1} and label_b == 1
    assert fake.names().index("resume") < len(fake.names()) - 1 - fake.names()[::-1].index("gen_start")
    engine.close()


def test_the_label_is_the_version_that_generated_the_turn_even_if_an_update_lands_right_after(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)

    async def turn_then_update() -> tuple[int, int, int, list[int]]:
        out = await engine.generate(PROMPT, 16, 1.0, 1.0)
        # the trainer's thread publishes between the turn's return and the rollout's label read
        await asyncio.to_thread(engine.load_weights, weights(), 5)
        return out.version, engine.version, contextvars.Context().run(lambda: engine.version), out.ids

    carried, label, now, ids = loop.run(turn_then_update())
    assert {token_version(t) for t in ids[:-1]} == {0} and carried == label == 0 and now == 5
    _, _, label = loop.run(turn(engine))
    assert label == 5
    engine.close()


def test_a_failed_update_stops_generation(fake: FakeVLLM, loop: Loop) -> None:
    engine = open_engine(fake)
    fake.dev_mode = False  # the weight routes vanish mid-update
    with pytest.raises(VLLMEngineError, match="start_weight_update"):
        engine.load_weights(weights(), 1)
    fake.dev_mode = True
    with pytest.raises(VLLMEngineError, match="failed half-way"):
        loop.run(engine.generate(PROMPT, 8, 1.0, 1.0))
    engine.close()
