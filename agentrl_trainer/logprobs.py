"""Log-probabilities of the sampled tokens under the model being trained.

Only the columns that hold a trained token are sent through the LM head (an agent row is mostly
prompt and environment text), and rows that start with the same long head — the system prompt
and tool schemas every episode of a task shares — can run that head once and share its
key/value cache; gradients flow back through the shared cache. Shapes: ``R`` rows, ``T`` tokens.
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
    if P == 0:
        out = model(input_ids=ids, attention_mask=attn, logits_to_keep=cols, use_cache=False)
    else:
        from transformers import DynamicCache

        base = _base_model(model)
        kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        cache = DynamicCache(config=base.config)
        model(input_ids=ids[:1, :P], use_cache=True, logits_to_keep=1, **{kw: cache})
        cache.batch_repeat_interleave(R)
        positions = torch.arange(P, ids.shape[1], device=ids.device).expand(R, -1)  # (R, T - P)
        out = model(
            input_ids=ids[:, P:],
            attention_mask=attn,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=cols - P,
            **{kw: cache},
        )
    logits = out.logits.float() / max(temperature, 1e-6)  # (R, K, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, targets_at][..., None])[..., 0]  # (R, K)
    return logp, targets_at
