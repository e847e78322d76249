"""Log-probabilities of the sampled tokens under the model being trained.

Only the columns that hold a trained token are sent through the LM head (an agent row is mostly
prompt and environment text), and rows that start with the same long head — the system prompt
and tool schemas every episode of a task shares — can run that head once and share its
key/value cache; gradients flow back through the shared cache. Shapes: ``R`` rows, ``T`` tokens.

Where the model is a plain decoder + LM head (:func:`_split_head`), the head runs only on the
(row, column) pairs that hold a trained token, not on every row at every trained column of any
row: on the five-task demo's batches (8 rows, turns at different positions per row) the full
``(R, K, V)`` logits took ~6 GB across their copies (the run was OOM-killed at 13 GB RSS), the
selected ones a fifth of that.

A token sampled under the tool-call grammar is scored as it was drawn: the model's softmax
renormalized over the tokens the grammar allowed at that step (``allowed_at`` / ``allowed_bits``
of the rows), the behaviour policy the engine recorded (docs/trainer.md, "Tool-call grammar").
The unconstrained logprob comes back too, without gradient, as a diagnostic.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, NamedTuple

import torch

from agentrl_envs.chat.decode import shared_head_length, unpack_token_mask

from .recompute import HeadCache, PrefixCache, chunked, recomputed_layers

__all__ = ["TokenLogprobs", "shared_head_length", "token_logprobs"]


class TokenLogprobs(NamedTuple):
    """What :func:`token_logprobs` returns."""

    logp: torch.Tensor  # (R, K) under the distribution each token was drawn from (with gradient)
    cols: torch.Tensor  # (K,) the columns of the trained tokens
    free: torch.Tensor  # (R, K) under the unconstrained softmax (no gradient; = logp where unrestricted)


def _base_model(model: Any) -> Any:
    model = getattr(model, "module", model)  # DDP / accelerate wrappers
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def token_logprobs(
    model: Any,
    rows: dict[str, torch.Tensor],
    temperature: float = 1.0,
    *,
    share_head: bool = True,
    recompute: bool = False,
    head_chunk: int = 256,
) -> TokenLogprobs:
    """Log-probabilities of ``input_ids[:, cols]`` given everything before, at the K columns where
    any row has ``loss_mask`` 1; logits are divided by ``temperature`` (the sampling
    distribution). ``rows``: ``input_ids``, ``attention_mask``, ``loss_mask`` (R, T),
    right-padded, and optionally ``allowed_at`` (M, 2) / ``allowed_bits`` (M, W): the (row,
    column) of trained tokens drawn from a restricted set and that set, packed; those tokens are
    scored under the softmax renormalized over their set. ``recompute``: keep only each decoder
    layer's input and ``head_chunk`` trained tokens' logits at a time, recomputing the rest in
    the backward (:mod:`agentrl_trainer.recompute`: the same values and gradients for a fraction
    of the memory). Without ``recompute``, a model that writes a cache must not use transformers'
    gradient checkpointing with ``share_head`` (it then turns the cache off).
    """
    ids, attn, mask = rows["input_ids"], rows["attention_mask"], rows["loss_mask"]
    targets_at = torch.nonzero(mask[:, 1:].any(dim=0)).flatten() + 1  # (K,) columns of trained tokens
    cols = targets_at - 1  # (K,) the positions that predict them
    R = ids.shape[0]
    P = shared_head_length(ids, int(cols.min())) if share_head and R > 1 and cols.numel() else 0
    split = _split_head(model)
    with recomputed_layers(model) if recompute else contextlib.nullcontext():
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": attn, "use_cache": False}
        if P > 0:
            base = _base_model(model)
            kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
            head = HeadCache(config=base.config)
            model(input_ids=ids[:1, :P], use_cache=True, logits_to_keep=1, **{kw: head})
            positions = torch.arange(P, ids.shape[1], device=ids.device).expand(R, -1)  # (R, T - P)
            kwargs = {
                "input_ids": ids[:, P:],
                "attention_mask": attn,
                "position_ids": positions,
                "use_cache": True,
                kw: PrefixCache.over(head, R, base.config),
            }
        targets = ids[:, targets_at]  # (R, K)
        chosen = mask[:, targets_at].bool()  # (R, K): the pairs that hold a trained token
        if split is None:
            logits = model(**kwargs, logits_to_keep=cols - P).logits[chosen]  # (N, V)
            hidden = None
        else:
            decoder, lm_head = split
            hidden = decoder(**kwargs).last_hidden_state[:, cols - P][chosen]  # (N, H)
    vocab = int(lm_head.out_features) if split is not None else int(logits.shape[-1])
    allowed = _allowed(rows, chosen, targets_at, vocab)  # (N, V) or None
    t = max(temperature, 1e-6)
    if hidden is None:
        picked, free = _picked(logits.float() / t, targets[chosen], allowed)
    else:

        def score(h: torch.Tensor, target: torch.Tensor, ok: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            return _picked(lm_head(h).float() / t, target, ok)

        if recompute:
            picked, free = chunked(score, head_chunk, hidden, targets[chosen], allowed)  # (N,), (N,)
        else:
            picked, free = score(hidden, targets[chosen], allowed)
    logp = torch.zeros(chosen.shape, dtype=picked.dtype, device=picked.device)
    free_all = torch.zeros(chosen.shape, dtype=free.dtype, device=free.device)
    # (R, K) each; 0 where no token is trained
    return TokenLogprobs(logp.masked_scatter(chosen, picked), targets_at, free_all.masked_scatter(chosen, free))


def _allowed(rows: dict[str, torch.Tensor], chosen: torch.Tensor, targets_at: torch.Tensor, vocab: int) -> torch.Tensor | None:
    """(N, V) bool: for each trained pair of ``chosen`` (row-major), the tokens it may be scored
    over (all, unless the rows name a restricted set for it); ``None`` when no pair is restricted."""
    at, bits = rows.get("allowed_at"), rows.get("allowed_bits")
    if at is None or bits is None or at.numel() == 0:
        return None
    R, K = chosen.shape
    k = torch.searchsorted(targets_at, at[:, 1].contiguous())  # (M,) the trained column of each restricted token
    if bool((k >= K).any()) or not bool((targets_at[k.clamp(max=K - 1)] == at[:, 1]).all()):
        raise ValueError("allowed_at names a column that holds no trained token")
    flat = chosen.flatten().long().cumsum(0) - 1  # (R * K,) the index of each trained pair among the N
    pair = flat[at[:, 0] * K + k]  # (M,)
    allowed = torch.ones((int(chosen.sum()), vocab), dtype=torch.bool, device=bits.device)  # (N, V)
    allowed[pair] = unpack_token_mask(bits, vocab)
    return allowed


def _picked(logits: torch.Tensor, targets: torch.Tensor, allowed: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, free)`` of ``targets`` (N,) under ``logits`` (N, V): over the ``allowed`` tokens
    (with gradient) and over all of them (without)."""
    with torch.no_grad():
        free = logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)  # (N,)
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))  # (N, V)
    logp = logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)  # (N,)
    return logp, free


#: config fields that make a causal LM's logits more than ``lm_head(decoder(x))``
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def _split_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, lm_head)`` when the model's logits are exactly ``lm_head(decoder(...))`` (a
    Llama-style causal LM, adapters included), else ``None`` (the model's own forward is used).
    Never under a DDP / FSDP / DeepSpeed wrapper (``.module``): its forward hooks the gradient
    reduction, so the call must go through it."""
    if hasattr(model, "module"):
        return None
    base = _base_model(model)
    decoder = getattr(base, "model", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or not isinstance(head, torch.nn.Linear):
        return None
    config = getattr(base, "config", None)
    if any(getattr(config, f, None) not in (None, 1, 1.0) for f in _LOGIT_TRANSFORMS):
        return None
    if type(base).__name__ not in _PLAIN_HEAD_MODELS:
        return None
    return decoder, head


#: causal LMs whose forward computes ``lm_head(model(...).last_hidden_state)`` and nothing more
_PLAIN_HEAD_MODELS = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
