"""token_logprobs: the shared-head path gives the same logprobs and gradients as the plain one."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from agentrl_trainer.logprobs import shared_head_length, token_logprobs  # noqa: E402


def _tiny_lora_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    model = transformers.LlamaForCausalLM(config)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    return peft.get_peft_model(model, lora)


def _rows():
    head = list(range(3, 23))  # 20 shared tokens
    seqs = [head + [30, 31, 32, 33, 34], head + [40, 41, 42], head + [50, 51, 52, 53, 54, 55, 56]]
    T = max(len(s) for s in seqs)
    ids = torch.zeros((3, T), dtype=torch.long)
    attn = torch.zeros((3, T), dtype=torch.long)
    mask = torch.zeros((3, T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        mask[i, 21 : len(s)] = 1  # trained tokens after the head (and one context token)
    mask[2, 24] = 0  # an environment token inside a row
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask}


def test_shared_head_length_counts_common_leading_tokens() -> None:
    ids = torch.tensor([[1] * 20 + [2, 3], [1] * 20 + [2, 4], [1] * 18 + [5, 5, 2, 3]])
    assert shared_head_length(ids, limit=100) == 18
    assert shared_head_length(ids, limit=17) == 17
    assert shared_head_length(ids[:2], limit=100) == 21
    assert shared_head_length(ids, limit=100, minimum=19) == 0


def test_shared_head_matches_the_plain_forward_in_values_and_gradients() -> None:
    model = _tiny_lora_model()
    model.train()
    rows = _rows()
    results = []
    for share in (False, True):
        model.zero_grad()
        logp, cols, _ = token_logprobs(model, rows, temperature=0.7, share_head=share)
        (logp * rows["loss_mask"][:, cols]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), cols, grads))
    (lp0, c0, g0), (lp1, c1, g1) = results
    assert torch.equal(c0, c1) and c0.tolist() == list(range(21, 27))
    m = rows["loss_mask"][:, c0].bool()
    assert torch.allclose(lp0[m], lp1[m], atol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-5), name
    # the head's parameters did get gradient through the shared cache
    assert any(float(g.abs().sum()) > 0 for n, g in g1.items() if "q_proj" in n)


def test_logprobs_equal_a_direct_computation() -> None:
    model = _tiny_lora_model().eval()
    rows = _rows()
    with torch.no_grad():
        logp, cols, _ = token_logprobs(model, rows, temperature=1.0, share_head=True)
        full = torch.log_softmax(model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits.float(), -1)
    expected = full[:, cols - 1].gather(-1, rows["input_ids"][:, cols][..., None])[..., 0]
    m = rows["loss_mask"][:, cols].bool()
    assert torch.allclose(logp[m], expected[m], atol=1e-5)


def test_head_on_trained_tokens_only_matches_the_models_own_forward(monkeypatch) -> None:
    """The LM head run on the trained (row, column) pairs only gives the model forward's values
    and gradients there (and 0 elsewhere)."""
    import agentrl_trainer.logprobs as lp

    model = _tiny_lora_model()
    model.train()
    rows = _rows()
    assert lp._split_head(model) is not None
    results = []
    for split in (True, False):
        if not split:
            monkeypatch.setattr(lp, "_split_head", lambda _m: None)
        model.zero_grad()
        logp, cols, _ = token_logprobs(model, rows, temperature=0.7, share_head=True)
        (logp * rows["loss_mask"][:, cols]).sum().backward()
        results.append((logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    (lp_split, g_split), (lp_full, g_full) = results
    m = rows["loss_mask"][:, cols].bool()
    assert torch.allclose(lp_split[m], lp_full[m], atol=1e-5) and bool((lp_split[~m] == 0).all())
    for name in g_full:
        assert torch.allclose(g_split[name], g_full[name], atol=1e-5), name


@pytest.mark.parametrize("share", [False, True])
def test_recomputed_activations_give_the_same_values_and_gradients_for_less_memory(share: bool) -> None:
    """recompute=True keeps each decoder layer's input and a chunk of the head's logits, not the
    layers' activations: the same logprobs and gradients (the shared head's cache included), and
    far fewer bytes saved for the backward (counted with saved_tensors_hooks)."""
    model = _tiny_lora_model()
    model.train()
    rows = _rows()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    results = []
    for recompute in (False, True):
        model.zero_grad()
        saved: dict[int, int] = {}

        def pack(t: torch.Tensor, saved: dict[int, int] = saved) -> torch.Tensor:
            key = t.untyped_storage().data_ptr()
            if key not in params:
                saved[key] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, cols, _ = token_logprobs(model, rows, temperature=0.7, share_head=share, recompute=recompute, head_chunk=4)
        (logp * rows["loss_mask"][:, cols]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), grads, sum(saved.values())))
    (lp0, g0, kept0), (lp1, g1, kept1) = results
    m = rows["loss_mask"][:, cols].bool()
    assert torch.allclose(lp0[m], lp1[m], atol=1e-6)
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-6), name
    assert kept1 < kept0 / 2, (kept0, kept1)
    # the layers' own settings are back as they were: a later plain forward keeps its activations
    assert not any(layer.gradient_checkpointing for layer in model.base_model.model.model.layers)


def test_a_grammar_restricted_token_is_scored_over_its_allowed_tokens() -> None:
    """A trained token drawn from a restricted set is scored under the softmax renormalized over
    that set (with gradient); its unconstrained logprob comes back as ``free``. A token forced
    (the set is itself alone) scores 0 whatever the model thinks of it."""
    from agentrl_envs.chat.decode import pack_token_mask

    model = _tiny_lora_model().eval()
    rows = _rows()
    vocab = model.config.vocab_size
    t_free, t_some, t_forced = (0, 22), (1, 22), (2, 23)  # (row, column) of three trained tokens
    some = torch.zeros(vocab, dtype=torch.bool)
    some[[5, 6, 7, int(rows["input_ids"][t_some])]] = True
    forced = torch.zeros(vocab, dtype=torch.bool)
    forced[int(rows["input_ids"][t_forced])] = True
    rows["allowed_at"] = torch.tensor([t_some, t_forced])
    rows["allowed_bits"] = torch.stack([pack_token_mask(some), pack_token_mask(forced)])
    with torch.no_grad():
        logp, cols, free = token_logprobs(model, rows, temperature=0.7, share_head=True)
        logits = model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits.float() / 0.7
    k = {c: i for i, c in enumerate(cols.tolist())}

    def expected(at: tuple[int, int], allowed: torch.Tensor | None) -> float:
        row, col = at
        z = logits[row, col - 1]
        if allowed is not None:
            z = z.masked_fill(~allowed, float("-inf"))
        return float(torch.log_softmax(z, -1)[rows["input_ids"][row, col]])

    assert float(logp[t_free[0], k[t_free[1]]]) == pytest.approx(expected(t_free, None), abs=1e-5)
    assert float(logp[t_some[0], k[t_some[1]]]) == pytest.approx(expected(t_some, some), abs=1e-5)
    assert float(logp[t_forced[0], k[t_forced[1]]]) == 0.0
    for at in (t_free, t_some, t_forced):
        assert float(free[at[0], k[at[1]]]) == pytest.approx(expected(at, None), abs=1e-5)
    assert expected(t_some, None) < expected(t_some, some)  # renormalizing over fewer tokens raises it
