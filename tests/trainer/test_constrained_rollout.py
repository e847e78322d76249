"""Episodes played under the tool-call grammar: the trainer's LocalEngine + run_episode (through
evaluate) with a real controller and echo worker, and the real SmolLM2."""

from __future__ import annotations

import json

import pytest

from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.chat.toolcalls import parse_completion
from agentrl_envs.client import ControllerClient
from agentrl_envs.stack import LocalStack
from agentrl_trainer.config import AgentRLConfig
from agentrl_trainer.engines.local import LocalEngine
from agentrl_trainer.evaluate import evaluate
from agentrl_trainer.rollout import RolloutSettings

pytestmark = [pytest.mark.model, pytest.mark.timeout(600)]
pytest.importorskip("xgrammar")


def _completions(segment) -> list[list[int]]:  # runs of trained (mask 1) tokens: one per turn
    runs: list[list[int]] = []
    prev = 0
    for tok, mask in zip(segment.input_ids, segment.loss_mask, strict=True):
        if mask and not prev:
            runs.append([])
        if mask:
            runs[-1].append(tok)
        prev = mask
    return runs


def _play_echo(settings: RolloutSettings, samples: int) -> tuple[list, LocalEngine]:
    """Episodes of the first ``samples`` echo samples with a fresh LocalEngine (closed after)."""
    engine = LocalEngine(TransformersEngine(), max_batch=8)
    try:
        with LocalStack(["echo"]) as stack:
            with ControllerClient(stack.url) as c:
                indices = c.get_indices("echo")[:samples]
            tokenizer = engine.engine.tokenizer
            return evaluate(stack.url, engine, tokenizer, engine.stop_token_ids, {"echo": indices}, settings), engine
    finally:
        engine.close()


def test_every_turn_is_one_valid_call_and_keeps_mask_and_logprobs() -> None:
    settings = RolloutSettings(max_tokens=48, max_turns=3, temperature=1.0, constrain_tool_calls=True)
    episodes, engine = _play_echo(settings, 4)
    tokenizer = engine.engine.tokenizer
    turns = 0
    for ep in episodes:
        assert not ep.infra_failure and ep.trajectory is not None
        for seg in ep.trajectory.segments:
            assert len(seg.logprobs) == len(seg.input_ids)
            sampled = [lp for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if m]
            # engine logprobs kept: all <= 0 (a token the model is sure of rounds to 0.0 in fp32), not the mask-0 fill
            assert sampled and all(lp <= 0 for lp in sampled) and sum(lp < 0 for lp in sampled) > len(sampled) // 2
        runs = _completions(ep.trajectory.segments[-1])
        assert len(runs) == ep.turns
        for ids in runs:
            turns += 1
            if ids[-1] in engine.stop_token_ids:
                calls = parse_completion(tokenizer.decode(ids[:-1]), ["echo"]).tool_calls
                assert len(calls) == 1 and calls[0].function.name == "echo"
                assert set(json.loads(calls[0].function.arguments)) == {"text"}
            else:
                assert len(ids) == settings.max_tokens  # only a token limit can cut a call short
    assert turns >= len(episodes)


def test_config_refuses_the_grammar_with_vllm() -> None:
    with pytest.raises(ValueError, match="constrain_tool_calls"):
        AgentRLConfig(output_dir="/tmp/x", tasks=["echo"], engine="vllm", constrain_tool_calls=True, report_to=[])


def test_a_text_answer_task_may_answer_in_text_the_others_must_call() -> None:
    """KG ends with a text answer ('Final Answer: #0'): its turns are sampled under the grammar's
    auto mode (text allowed), every other task's under the required mode (one call). Same prompt,
    greedy, the real model: text for the text-answer task, a call otherwise."""
    import asyncio

    from agentrl_trainer.rollout import EngineChoice, TokenPolicy

    tools = [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echo text back.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            },
        }
    ]
    messages = [
        {"role": "system", "content": "You answer questions. Reply with 'Final Answer: ' and the answer, without a tool."},
        {"role": "user", "content": "What is 2 + 2? Reply: Final Answer: 4"},
    ]
    engine = LocalEngine(TransformersEngine(), max_batch=4)

    async def act(task: str) -> dict:
        settings = RolloutSettings(max_tokens=24, temperature=0.0, constrain_tool_calls=True, text_answer_tasks=("kg",))
        policy = TokenPolicy(
            lambda _turn: EngineChoice(engine, 0, False), engine.engine.tokenizer, engine.stop_token_ids, settings, task=task
        )
        return await policy.act(messages, tools)

    try:
        text_reply, call_reply = asyncio.run(act("kg")), asyncio.run(act("db"))
    finally:
        engine.close()
    assert "tool_calls" not in text_reply and "4" in text_reply["content"]
    assert [c["function"]["name"] for c in call_reply["tool_calls"]] == ["echo"]
    assert AgentRLConfig(output_dir="/tmp/x", tasks=["kg"], report_to=[]).text_answer_tasks == ["kg"]


def test_close_calls_in_budget_ends_every_turn_with_a_valid_call() -> None:
    """Hot sampling and a budget the echo call barely fits (its text ~17 tokens, its end 8 + the
    stop token): with close_calls_in_budget every turn still ends with a stop token and one call
    whose arguments are JSON."""
    settings = RolloutSettings(max_tokens=32, max_turns=2, temperature=1.5, constrain_tool_calls=True, close_calls_in_budget=True)
    episodes, engine = _play_echo(settings, 6)
    tokenizer = engine.engine.tokenizer
    turns = [ids for ep in episodes for ids in _completions(ep.trajectory.segments[-1])]
    assert len(turns) >= 6
    for ids in turns:
        assert len(ids) <= 32 and ids[-1] in engine.stop_token_ids
        calls = parse_completion(tokenizer.decode(ids[:-1]), ["echo"]).tool_calls
        assert len(calls) == 1 and isinstance(json.loads(calls[0].function.arguments)["text"], str)
    assert any(len(ids) == 32 for ids in turns)  # some turns used the whole budget and were closed in it


def test_a_token_the_grammar_forced_keeps_ratio_one_however_the_policy_moves() -> None:
    """The behaviour policy under the grammar is the distribution a token was drawn from (the
    model's softmax over the tokens the grammar allowed), and the trainer scores it the same way
    (docs/trainer.md, "Tool-call grammar"). A token the grammar forced was drawn with probability
    1: its recorded logprob is 0 and its importance ratio stays 1 after the policy learns to
    prefer it unconstrained, where the unconstrained ratio (the first ablation's) explodes: there
    a token the base model gives ~e^-13 that the policy comes to favour reads as a ratio of ~e^12.6.
    Real SmolLM2 and grammar; the "learned" policy is the model with a bias on the LM head that
    lifts the forced tokens."""
    import asyncio

    import torch

    from agentrl_envs.chat.decode import unpack_token_mask
    from agentrl_envs.schema import Message, ToolDefinition
    from agentrl_trainer.logprobs import token_logprobs

    echo = ToolDefinition.model_validate(
        {
            "type": "function",
            "function": {
                "name": "echo_the_given_text",
                "description": "Echo text back.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            },
        }
    )
    chat = TransformersEngine()
    engine = LocalEngine(chat, max_batch=2)
    prompt = chat.encode_prompt([Message(role="user", content="Say hello.")], [echo])
    try:
        out = asyncio.run(engine.generate(prompt, 40, 0.7, 1.0, tools=[echo], seed=3))
    finally:
        engine.close()
    assert out.allowed is not None and out.free_logprobs is not None

    vocab = chat.model.config.vocab_size
    sizes = [None if a is None else int(unpack_token_mask(a, vocab).sum()) for a in out.allowed]
    forced = [i for i, n in enumerate(sizes) if n == 1]
    assert forced and all(out.logprobs[i] == 0.0 for i in forced)  # drawn with probability 1
    assert min(out.free_logprobs[i] for i in forced) < -1.0  # ... which the model alone would rarely pick

    ids = torch.tensor([prompt + out.ids])
    n = len(prompt)
    rows = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "loss_mask": torch.tensor([[0] * n + [1] * len(out.ids)]),
        "allowed_at": torch.tensor([[0, n + i] for i, a in enumerate(out.allowed) if a is not None]),
        "allowed_bits": torch.stack([a for a in out.allowed if a is not None]),
    }
    old = torch.tensor(out.logprobs)
    old_free = torch.tensor(out.free_logprobs)
    model = chat.model
    with torch.no_grad():
        same = token_logprobs(model, rows, temperature=0.7, share_head=False)
        assert torch.allclose(same.logp[0], old, atol=2e-3)  # the same weights: ratio 1 everywhere
        assert torch.allclose(same.free[0], old_free, atol=2e-3)
        head = model.lm_head
        lifted = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        lifted.weight = head.weight
        lifted.bias.zero_()
        lifted.bias[[out.ids[i] for i in forced]] = 15.0  # the policy now favours the forced tokens
        model.lm_head = lifted
        try:
            moved = token_logprobs(model, rows, temperature=0.7, share_head=False)
        finally:
            model.lm_head = head
    log_ratio = moved.logp[0] - old
    free_log_ratio = moved.free[0] - old_free
    assert float(log_ratio[forced].abs().max()) < 1e-4  # forced: no choice, ratio 1
    assert float(free_log_ratio[forced].max()) > 5.0  # unconstrained, the ratio of a forced token explodes
