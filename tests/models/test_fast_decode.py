"""The packed decode path (agentrl_envs.chat.fast_decode / llama) against transformers' own forward.

The reference is the same engine with ``packed=False`` (transformers' LlamaForCausalLM and its
DynamicCache, the path used before the packed one existed): greedy completions must be identical
and logprobs within 1e-4; the head cache must reuse earlier turns without changing a token.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
import torch
from model_helpers import TinyTokenizer

from agentrl_envs.chat.decode import DecodeRow, inverse_cdf
from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.chat.fast_decode import FastDecodeBatch, HeadCache, common_prefix
from agentrl_envs.chat.llama import bfloat16_available
from agentrl_envs.chat.sampling import BatchSampler
from agentrl_envs.protocol.openai import Message

SYSTEM = "You are a helpful assistant. Answer in one short sentence. " * 4
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about a cat who likes to sail.",
    "List three colors.",
    "How many legs does a spider have?",
    "Translate 'good morning' to French.",
    "What is 12 times 12?",
]


@pytest.fixture(scope="module")
def pair(engine: TransformersEngine) -> tuple[TransformersEngine, TransformersEngine]:
    """(reference, packed) engines over the same weights."""
    ref = TransformersEngine.from_model(engine.model, engine.tokenizer, packed=False)
    fast = TransformersEngine.from_model(engine.model, engine.tokenizer, packed=True)
    return ref, fast


def _prompts(engine: TransformersEngine) -> list[list[int]]:
    return [engine.encode_prompt([Message(role="system", content=SYSTEM), Message(role="user", content=q)]) for q in QUESTIONS]


@pytest.mark.model
def test_the_default_model_decodes_packed(engine: TransformersEngine) -> None:
    assert engine.packed is not None


@pytest.mark.model
def test_live_lists_the_batches_and_caches_that_exist_and_keeps_none_alive(engine: TransformersEngine) -> None:
    gc.collect()
    before = len(FastDecodeBatch.live()), len(HeadCache.live())
    cache = engine.new_prefix_cache(1000)
    batch = engine.new_batch(prefix_cache=cache)
    assert any(b is batch for b in FastDecodeBatch.live()) and any(c is cache for c in HeadCache.live())
    assert (len(FastDecodeBatch.live()), len(HeadCache.live())) == (before[0] + 1, before[1] + 1)
    del batch, cache
    gc.collect()
    assert (len(FastDecodeBatch.live()), len(HeadCache.live())) == before


@pytest.mark.model
@pytest.mark.parametrize("batched", [False, True])
def test_greedy_completions_equal_the_transformers_path(pair, batched: bool) -> None:  # type: ignore[no-untyped-def]
    ref, fast = pair
    prompts = _prompts(ref)
    if batched:  # one batch: the shared system prompt becomes one head for all rows
        expected, got = ref.generate_batch(prompts, 40, temperature=0.0), fast.generate_batch(prompts, 40, temperature=0.0)
    else:
        expected = [ref.generate_tokens(p, 40) for p in prompts]
        got = [fast.generate_tokens(p, 40) for p in prompts]
    for (ids_ref, lp_ref), (ids, lp) in zip(expected, got, strict=True):
        assert ids == ids_ref
        assert max(abs(a - b) for a, b in zip(lp, lp_ref, strict=True)) < 1e-4


@pytest.mark.model
def test_bfloat16_products_stay_close_to_float32_and_are_refused_without_the_packed_path(pair) -> None:  # type: ignore[no-untyped-def]
    """``dtype="bfloat16"`` (the server's ``--dtype``): not exact, but close. Greedy completions
    agree for most of their tokens and, where they agree, each token's logprob is within 0.25 of
    float32's (measured: up to ~0.1); they do differ (bfloat16 is really used)."""
    _, fast = pair
    with pytest.raises(ValueError, match="needs packed decoding"):
        TransformersEngine.from_model(fast.model, fast.tokenizer, packed=False, dtype="bfloat16")
    with pytest.raises(ValueError, match="float16"):
        TransformersEngine.from_model(fast.model, fast.tokenizer, dtype="float16")
    if not bfloat16_available():  # a CPU without AVX-512 BF16 / AMX: refused with the reason
        with pytest.raises(ValueError, match="bfloat16 matrix products need"):
            TransformersEngine.from_model(fast.model, fast.tokenizer, packed=True, dtype="bfloat16")
        pytest.skip("this CPU has no oneDNN bfloat16 products: only the refusal was checked")
    bf16 = TransformersEngine.from_model(fast.model, fast.tokenizer, packed=True, dtype="bfloat16")
    assert bf16.dtype == "bfloat16" and bf16.packed is not None and bf16.packed.dtype == torch.bfloat16
    prompts = _prompts(fast)
    expected, got = fast.generate_batch(prompts, 40, temperature=0.0), bf16.generate_batch(prompts, 40, temperature=0.0)
    agreed = 0
    largest = 0.0
    for (ids_ref, lp_ref), (ids, lp) in zip(expected, got, strict=True):
        n = next((i for i, (a, b) in enumerate(zip(ids_ref, ids, strict=False)) if a != b), min(len(ids_ref), len(ids)))
        agreed += n
        largest = max([largest, *(abs(a - b) for a, b in zip(lp_ref[:n], lp[:n], strict=True))])
    assert agreed >= 0.5 * sum(len(ids) for ids, _ in expected)
    assert 1e-4 < largest < 0.25


@pytest.mark.model
def test_seeded_sampling_is_reproducible_and_equal_across_paths(pair) -> None:  # type: ignore[no-untyped-def]
    ref, fast = pair
    prompts = _prompts(ref)[:4]
    a = fast.generate_batch(prompts, 32, temperature=0.8, seed=7)
    b = fast.generate_batch(prompts, 32, temperature=0.8, seed=7)
    c = ref.generate_batch(prompts, 32, temperature=0.8, seed=7)
    assert [x[0] for x in a] == [x[0] for x in b] == [x[0] for x in c]
    assert [x[0] for x in a] != [x[0] for x in fast.generate_batch(prompts, 32, temperature=0.8, seed=8)]


@pytest.mark.model
def test_rows_joining_with_different_heads_decode_as_alone(pair) -> None:  # type: ignore[no-untyped-def]
    """Rows admitted at different times (their own heads, one head shared by two, none) decode
    in one batch exactly as each would alone."""
    ref, fast = pair
    prompts = _prompts(ref)
    alone = [ref.generate_tokens(p, 24)[0] for p in prompts[:4]]
    cache = fast.new_prefix_cache(32768)
    batch = fast.new_batch(prefix_cache=cache)
    rows = [DecodeRow(list(p), 24, 0.0) for p in prompts[:4]]
    batch.add(rows[:1])  # no head: its whole prompt is its own
    batch.step()
    batch.add(rows[1:3])  # two rows: their shared system prompt becomes a head
    batch.step()
    batch.add(rows[3:])  # alone, after the others: the cache gives it the shared head
    while len(batch):
        batch.step()
    assert [r.completion_ids for r in rows] == alone
    assert cache.hits >= 1


@pytest.mark.model
def test_the_next_turn_reuses_the_last_and_samples_the_same(pair) -> None:  # type: ignore[no-untyped-def]
    """A second turn whose prompt extends the first turn's prompt and completion computes only
    the new tokens (from the finished row's snapshot) and samples what a fresh engine samples."""
    ref, fast = pair
    prompt = _prompts(ref)[1]

    async def two_turns(sampler: BatchSampler) -> tuple[list[int], list[int]]:
        first = await sampler.generate(prompt, 24, temperature=0.0)
        follow = ref.tokenizer("<|im_end|>\n<|im_start|>user\nShorter, please.<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
        second_prompt = prompt + first.completion_ids + follow
        second = await sampler.generate(second_prompt, 24, temperature=0.0)
        return second_prompt, second.completion_ids

    sampler = BatchSampler(fast, prefix_cache_tokens=32768)
    try:
        second_prompt, second = asyncio.run(two_turns(sampler))
        prefilled = sampler._batch.prefilled_tokens if sampler._batch is not None else None
    finally:
        sampler.close()
    assert second == ref.generate_tokens(second_prompt, 24)[0]
    assert prefilled is not None and prefilled < len(prompt) + 40  # not twice the prompt
    assert sampler.prefix_cache.hits >= 1


def test_head_cache_lookup_reuses_heads_and_snapshots() -> None:
    L, KV, D = 2, 1, 4
    cache = HeadCache(10_000)

    def kv(n: int, value: float) -> torch.Tensor:
        return torch.full((L, KV, n, D), value)

    from agentrl_envs.chat.fast_decode import Head

    system = tuple(range(40))
    head = Head(system, kv(40, 1.0), kv(40, 1.0))
    cache.add_head(head)
    # a prompt that starts with the head reuses exactly it
    got, own_k, _, n = cache.lookup(system + (100, 101))
    assert got is head and own_k is None and n == 40
    # a finished row's snapshot: the next turn gets the head and the row's own KV
    row = system + tuple(range(200, 230))
    cache.add_snapshot(row, head, kv(30, 2.0), kv(30, 2.0))
    assert cache.kv_bytes == 2 * 4 * L * KV * D * (40 + 30)  # keys and values, float32
    got, own_k, own_v, n = cache.lookup(row + (7, 8))
    assert got is head and n == 70 and own_k is not None and own_k.shape == (L, KV, 30, D) and float(own_k[0, 0, 0, 0]) == 2.0
    # a prompt sharing only part of the head gets one cut object, the same one every time
    short = system[:30] + (999,)
    first, _, _, n1 = cache.lookup(short)
    second, _, _, n2 = cache.lookup(short)
    assert n1 == n2 == 30 and first is second and first.keys.shape[2] == 30
    # under MIN_HEAD shared tokens: nothing
    assert cache.lookup((5000, 5001, 5002))[3] == 0
    # a later snapshot of the same row covers the earlier one; heads stay
    cache.add_snapshot(row + (300,), head, kv(31, 3.0), kv(31, 3.0))
    assert row not in cache._entries and system in cache._entries


def test_head_cache_evicts_least_recently_used_within_its_budget() -> None:
    from agentrl_envs.chat.fast_decode import Head

    cache = HeadCache(100)
    a = Head(tuple(range(60)), torch.zeros(1, 1, 60, 2), torch.zeros(1, 1, 60, 2))
    b = Head(tuple(range(1000, 1060)), torch.zeros(1, 1, 60, 2), torch.zeros(1, 1, 60, 2))
    cache.add_head(a)
    cache.add_head(b)
    assert len(cache) == 1 and cache.lookup(b.tokens)[0] is b and cache.lookup(a.tokens)[3] == 0


@pytest.mark.parametrize("a,b,n", [((), (1,), 0), ((1, 2, 3), (1, 2, 3), 3), ((1, 2, 3), (1, 2, 4), 2), ((1, 2), (1, 2, 3), 2)])
def test_common_prefix(a: tuple[int, ...], b: tuple[int, ...], n: int) -> None:
    assert common_prefix(a, b) == n
    long = tuple(range(5000))
    assert common_prefix(long, long[:3333] + (-1,)) == 3333


def test_inverse_cdf_never_draws_a_zero_probability_id_and_matches_the_distribution() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        V = int(torch.randint(1, 1500, (1,), generator=g))
        p = torch.rand(3, V, generator=g) ** 8
        p[p < 0.1] = 0
        p[:, -1] += 1e-3
        drawn = inverse_cdf(p, torch.rand(3, generator=g), block=64)
        assert (p[torch.arange(3), drawn] > 0).all()
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3]])
    counts = torch.zeros(4)
    for _ in range(20_000):
        counts[inverse_cdf(p, torch.rand(1, generator=g), block=2)] += 1
    assert torch.allclose(counts / 20_000, p[0], atol=0.015) and counts[1] == 0


def test_packed_weights_follow_lora_adapters_and_weight_loads() -> None:
    """A peft model (LoRA not merged) decodes as transformers computes it, and after new weights
    are loaded (what the RL trainer does each step) the packed copy follows them."""
    peft = pytest.importorskip("peft")
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    base = transformers.LlamaForCausalLM(config).eval()
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    model = peft.get_peft_model(base, lora).eval()

    ref = TransformersEngine.from_model(model, TinyTokenizer(), packed=False)
    fast = TransformersEngine.from_model(model, TinyTokenizer(), packed=True)
    prompts = [
        [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 3],
        [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 70, 71],
    ]

    def same() -> None:
        a, b = ref.generate_batch(prompts, 12, temperature=0.0), fast.generate_batch(prompts, 12, temperature=0.0)
        assert [x[0] for x in a] == [x[0] for x in b]
        assert max(abs(u - v) for x, y in zip(a, b, strict=True) for u, v in zip(x[1], y[1], strict=True)) < 1e-4

    same()
    before = fast.generate_batch(prompts, 12, temperature=0.0)
    new = {n: t + 0.5 * torch.randn_like(t) for n, t in model.state_dict().items() if "lora_B" in n}
    fast.load_state_dict(new, strict=False)  # the same model object: the reference sees it too
    same()
    assert [x[0] for x in fast.generate_batch(prompts, 12, temperature=0.0)] != [x[0] for x in before]


@pytest.mark.model
def test_a_shared_head_the_cache_already_holds_in_full_is_not_recomputed(pair) -> None:  # type: ignore[no-untyped-def]
    """Two rows arriving together whose shared head a finished row's snapshot covers exactly (its
    head plus its own tokens): nothing is left to compute for the head, and both rows sample as
    alone. (Found by the model server benchmark: the empty remainder used to fail the batch.)"""
    ref, fast = pair
    prompts = _prompts(ref)[:2]
    cache = fast.new_prefix_cache(32768)
    batch = fast.new_batch(prefix_cache=cache)
    first = [DecodeRow(list(p), 8, 0.0) for p in prompts]  # a head (the system prompt) + own questions
    batch.add(first)
    while len(batch):
        batch.step()
    again = [DecodeRow(list(prompts[1]), 8, 0.0), DecodeRow(list(prompts[1]), 8, 0.0)]
    batch.add(again)
    while len(batch):
        batch.step()
    expected = ref.generate_tokens(prompts[1], 8)[0]
    assert [r.completion_ids for r in again] == [expected, expected] and first[1].completion_ids == expected


def test_a_row_reusing_a_long_snapshot_gets_a_slot_for_all_its_own_tokens(pair) -> None:  # type: ignore[no-untyped-def]
    """A next turn that reuses a finished row's snapshot (its head + its own tokens) holds those
    own tokens in its KV slot too: the slot must fit them, the new ones and the completion. (A
    new batch sized the slot without the reused tokens; the kg task's later turns failed.)"""
    ref, fast = pair
    long_questions = [q + " Some context: " + "the quick brown fox jumps over the lazy dog, " * 30 for q in QUESTIONS[:2]]
    prompts = [
        ref.encode_prompt([Message(role="system", content=SYSTEM), Message(role="user", content=q)]) for q in long_questions
    ]
    cache = fast.new_prefix_cache(32768)
    batch = fast.new_batch(prefix_cache=cache)
    first = [DecodeRow(list(p), 96, 0.0) for p in prompts]  # the system prompt is their shared head
    batch.add(first)
    while len(batch):
        batch.step()
    follow = ref.tokenizer("<|im_end|>\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    second_prompt = list(prompts[1]) + first[1].completion_ids + follow
    hits = cache.hits
    fresh = fast.new_batch(prefix_cache=cache)  # its slot buffers start small
    second = DecodeRow(second_prompt, 96, 0.0)
    fresh.add([second])
    while len(fresh):
        fresh.step()
    assert cache.hits > hits and len(prompts[1]) - len(prompts[0]) < 20 and len(prompts[1]) > 300
    assert second.completion_ids == ref.generate_tokens(second_prompt, 96)[0]


@pytest.mark.model
def test_slot_memory_goes_back_when_the_rows_that_needed_it_leave(pair) -> None:  # type: ignore[no-untyped-def]
    """The slot buffers grow to the most rows and the longest row held (46 KB a token-slot); once
    a long row has left and the rest need less than half, they shrink to what the rows still
    need, and the rows left decode exactly as alone."""
    ref, fast = pair
    long_prompt = ref.encode_prompt([Message(role="user", content="Repeat: " + "the lazy dog, " * 120)])
    short = _prompts(ref)[:3]
    batch = fast.new_batch()
    rows = [DecodeRow(list(long_prompt), 2, 0.0)] + [DecodeRow(list(p), 24, 0.0) for p in short]
    batch.add(rows)
    grown = batch.slots
    assert grown[1] >= len(long_prompt)  # every slot as long as the long row
    assert batch.kv_bytes == 2 * 4 * fast.packed.n_layers * fast.packed.n_kv_heads * fast.packed.head_dim * grown[0] * grown[1]
    batch.step()  # the long row's 2 tokens are out: it leaves
    batch.step()
    assert rows[0].done and len(batch) == 3
    shrunk = batch.slots
    assert shrunk[0] <= 3 + 1 and shrunk[1] < grown[1] // 2, (grown, shrunk)
    assert len(batch.own_tokens) == 3 and max(batch.own_tokens) <= shrunk[1]
    while len(batch):
        batch.step()
    assert batch.slots[0] == 0 and batch.kv_bytes == 0  # nothing held once every row has left
    assert [r.completion_ids for r in rows[1:]] == [ref.generate_tokens(p, 24)[0] for p in short]


def test_head_length_says_what_lookup_would_share_and_changes_nothing() -> None:
    from agentrl_envs.chat.fast_decode import Head

    L, KV, D = 2, 1, 4
    cache = HeadCache(10_000)
    system = tuple(range(40))
    head = Head(system, torch.zeros(L, KV, 40, D), torch.zeros(L, KV, 40, D))
    cache.add_head(head)
    row = system + tuple(range(200, 230))
    cache.add_snapshot(row, head, torch.zeros(L, KV, 30, D), torch.zeros(L, KV, 30, D))
    before = (cache.hits, cache.reused_tokens, list(cache._entries))
    # the snapshot's own 30 tokens go into the row's slot: only the head is shared
    assert cache.head_length(row + (7,)) == 40
    assert cache.head_length(system[:30] + (999,)) == 30
    assert cache.head_length((5000, 5001)) == 0
    assert (cache.hits, cache.reused_tokens, list(cache._entries)) == before
    assert cache.lookup(row + (7,))[0] is head


@pytest.mark.model
def test_a_slot_token_bound_holds_rows_back_and_changes_no_completion(pair) -> None:  # type: ignore[no-untyped-def]
    """With ``max_slot_tokens`` the slot buffers (rows x longest own tokens) never pass the
    bound while more than one row runs: a request that would pass it waits its turn; every
    completion is the one sampled without a bound."""
    ref, fast = pair
    long_prompt = ref.encode_prompt([Message(role="user", content="Repeat: " + "the lazy dog, " * 150)])
    assert 512 < len(long_prompt) + 16 <= 768  # its slot: 768 tokens, so no second row fits 1,024
    prompts = [list(long_prompt)] + _prompts(ref)[:4]
    bound = 2 * 512
    batch = fast.new_batch(max_slot_tokens=bound)
    rows = [DecodeRow(list(p), 16, 0.0) for p in prompts]
    assert batch.room(rows) == 1 and batch.room(rows[1:]) == 4  # 4 x 256 short slots fit
    seen: list[tuple[int, int, int]] = []
    waiting = list(rows)
    while waiting or len(batch):
        k = batch.room(waiting)
        if k:
            batch.add(waiting[:k])
            waiting = waiting[k:]
        S, T = batch._k.shape[1], batch._k.shape[3]
        seen.append((len(batch), S, T))
        if len(batch) > 1:
            assert S * T <= bound, seen
        batch.step()
    assert seen[0][0] == 1 and max(n for n, _, _ in seen) == 4, seen
    assert [r.completion_ids for r in rows] == [ref.generate_tokens(p, 16)[0] for p in prompts]

    async def through_the_sampler() -> list[list[int]]:
        sampler = BatchSampler(fast, max_batch=8, max_slot_tokens=bound)
        try:
            done = await asyncio.gather(*(sampler.generate(p, 16, 0.0) for p in prompts))
        finally:
            sampler.close()
        return [d.completion_ids for d in done]

    assert asyncio.run(through_the_sampler()) == [r.completion_ids for r in rows]
    with pytest.raises(ValueError, match="max_slot_tokens"):
        BatchSampler(fast, max_slot_tokens=-1)


def test_engines_over_one_frozen_base_share_its_packed_copy() -> None:
    """Two engines over peft models that share their frozen base tensors (the RL trainer's
    engines: agentrl_trainer.distributed.share_frozen_weights) hold one packed base, not one each;
    each still decodes as transformers computes its own adapters, before and after an adapter
    load, and the load repacks nothing."""
    peft = pytest.importorskip("peft")
    import copy

    import transformers

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    first = peft.get_peft_model(transformers.LlamaForCausalLM(config), lora).eval()
    second = copy.deepcopy(first)
    frozen = {n: p for n, p in first.named_parameters() if not p.requires_grad}
    for name, p in second.named_parameters():
        if name in frozen:
            p.data = frozen[name].data
    engines = [TransformersEngine.from_model(m, TinyTokenizer(), packed=True) for m in (first, second)]
    refs = [TransformersEngine.from_model(m, TinyTokenizer(), packed=False) for m in (first, second)]
    a, b = (e.packed for e in engines)
    assert a is not None and b is not None
    assert all(x.qkv.weight is y.qkv.weight and x.down.weight is y.down.weight for x, y in zip(a._layers, b._layers, strict=True))
    assert a._head.weight is b._head.weight
    assert a._layers[0].qkv.lora_a is not None and a._layers[0].qkv.lora_a is not b._layers[0].qkv.lora_a
    prompts = [[1, 5, 9, 13, 17, 21, 25, 29, 33, 3], [1, 5, 9, 13, 17, 21, 25, 29, 33, 70, 71]]

    def same(i: int) -> list[list[int]]:
        x, y = refs[i].generate_batch(prompts, 10, temperature=0.0), engines[i].generate_batch(prompts, 10, temperature=0.0)
        assert [r[0] for r in x] == [r[0] for r in y]
        assert max(abs(u - v) for p, q in zip(x, y, strict=True) for u, v in zip(p[1], q[1], strict=True)) < 1e-4
        return [r[0] for r in y]

    before = [same(0), same(1)]
    packed_before = a._layers[1].gate_up.weight
    new = {n: t + 0.5 * torch.randn_like(t) for n, t in second.state_dict().items() if "lora_" in n}
    engines[1].load_state_dict(new, strict=False)
    assert same(0) == before[0]  # the first engine's adapters did not move
    assert same(1) != before[1]
    assert b._layers[1].gate_up.weight is packed_before is a._layers[1].gate_up.weight  # nothing repacked
    name = next(n for n in first.state_dict() if n.endswith("layers.1.mlp.up_proj.base_layer.weight"))
    engines[0].load_state_dict({name: 3 * torch.randn_like(first.state_dict()[name])}, strict=False)  # a base weight: repacked
    assert a._layers[1].gate_up.weight is not packed_before
    assert same(0) != before[0]
