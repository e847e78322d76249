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
        logp, cols = token_logprobs(model, rows, temperature=0.7, share_head=share)
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
        logp, cols = token_logprobs(model, rows, temperature=1.0, share_head=True)
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
        logp, cols = token_logprobs(model, rows, temperature=0.7, share_head=True)
        (logp * rows["loss_mask"][:, cols]).sum().backward()
        results.append((logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    (lp_split, g_split), (lp_full, g_full) = results
    m = rows["loss_mask"][:, cols].bool()
    assert torch.allclose(lp_split[m], lp_full[m], atol=1e-5) and bool((lp_split[~m] == 0).all())
    for name in g_full:
        assert torch.allclose(g_split[name], g_full[name], atol=1e-5), name
