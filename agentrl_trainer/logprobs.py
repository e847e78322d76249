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
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from agentrl_envs.chat.decode import shared_head_length

__all__ = ["shared_head_length", "token_logprobs"]


def _base_model(model: Any) -> Any:
    model = getattr(model, "module", model)  # DDP / accelerate wrappers
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def token_logprobs(
    model: Any, rows: dict[str, torch.Tensor], temperature: float = 1.0, *, share_head: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, cols)``: logp (R, K) of ``input_ids[:, cols]`` given everything before, at the K
    columns where any row has ``loss_mask`` 1; logits are divided by ``temperature`` (the
    sampling distribution). ``rows``: ``input_ids``, ``attention_mask``, ``loss_mask`` (R, T),
    right-padded. A model that writes a cache must not use gradient checkpointing with
    ``share_head`` (transformers then turns the cache off).
    """
    ids, attn, mask = rows["input_ids"], rows["attention_mask"], rows["loss_mask"]
    targets_at = torch.nonzero(mask[:, 1:].any(dim=0)).flatten() + 1  # (K,) columns of trained tokens
    cols = targets_at - 1  # (K,) the positions that predict them
    R = ids.shape[0]
    P = shared_head_length(ids, int(cols.min())) if share_head and R > 1 and cols.numel() else 0
    split = _split_head(model)
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": attn, "use_cache": False}
    if P > 0:
        from transformers import DynamicCache

        base = _base_model(model)
        kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        cache = DynamicCache(config=base.config)
        model(input_ids=ids[:1, :P], use_cache=True, logits_to_keep=1, **{kw: cache})
        cache.batch_repeat_interleave(R)
        positions = torch.arange(P, ids.shape[1], device=ids.device).expand(R, -1)  # (R, T - P)
        kwargs = {"input_ids": ids[:, P:], "attention_mask": attn, "position_ids": positions, "use_cache": True, kw: cache}
    targets = ids[:, targets_at]  # (R, K)
    if split is None:
        out = model(**kwargs, logits_to_keep=cols - P)
        logits = out.logits.float() / max(temperature, 1e-6)  # (R, K, V)
        return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0], targets_at  # (R, K)
    decoder, head = split
    hidden = decoder(**kwargs).last_hidden_state[:, cols - P]  # (R, K, H)
    chosen = mask[:, targets_at].bool()  # (R, K): the pairs that hold a trained token
    logits = head(hidden[chosen]).float() / max(temperature, 1e-6)  # (N, V)
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets[chosen][:, None])[:, 0]  # (N,)
    logp = torch.zeros(chosen.shape, dtype=picked.dtype, device=picked.device)
    return logp.masked_scatter(chosen, picked), targets_at  # (R, K), 0 where no token is trained


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
