"""The policy loss of AgentRL: PPO clip with dual clip, k3 KL to a reference, token-mean.

Pure tensor code. Shapes: ``B`` rows, ``T`` tokens; every input is (B, T) and only the entries
where ``mask`` is 1 count.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["LossTerms", "policy_loss"]


class LossTerms(NamedTuple):
    loss: torch.Tensor  # () what backward() takes
    pg_loss: torch.Tensor  # () token-mean clipped policy-gradient term
    kl: torch.Tensor  # () token-mean k3 KL (0 without a reference)
    clip_fraction: torch.Tensor  # () share of tokens where the PPO clip was active
    dual_clip_fraction: torch.Tensor  # () share of tokens where the dual clip was active
    ratio_mean: torch.Tensor  # () mean π/π_rollout


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    dual_clip: float | None = 3.0,
    kl_coef: float = 0.0,
    normalizer: float | None = None,
) -> LossTerms:
    """PPO loss against the rollout logprobs (whichever engine produced each token).

    Per token, with r = exp(logπ − logπ_old) and advantage A:
    ``pg = max(−A·r, −A·clip(r, 1−ε, 1+ε_high))``; for A < 0 the dual clip caps it at ``−A·c``
    (``dual_clip=c``, must be > 1; ``None`` turns it off). The k3 estimator
    ``exp(ref − logπ) − (ref − logπ) − 1`` adds ``kl_coef ×`` KL to a reference. The sum over masked
    tokens is divided by ``normalizer`` (default: their count) — token-mean; pass the batch's
    total token count when a batch is split in micro-batches.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (AgentRL uses 3); got {dual_clip}")
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    m = mask.to(logprobs.dtype)  # (B, T)
    count = m.sum()
    denom = torch.as_tensor(normalizer if normalizer is not None else count.clamp(min=1.0), dtype=logprobs.dtype)
    log_ratio = (logprobs - old_logprobs) * m  # (B, T): 0 off-mask so exp() stays finite
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + eps_high)  # (B, T)
    pg = torch.maximum(unclipped, clipped)  # (B, T)
    dual_active = torch.zeros_like(m, dtype=torch.bool)
    if dual_clip is not None:
        cap = -advantages * dual_clip  # (B, T): only binding where A < 0
        dual_active = (advantages < 0) & (pg > cap)
        pg = torch.where(advantages < 0, torch.minimum(pg, cap), pg)
    per_token = pg
    kl = torch.zeros_like(pg)
    if ref_logprobs is not None:
        delta = (ref_logprobs - logprobs) * m  # (B, T)
        kl = torch.exp(delta) - delta - 1.0  # (B, T) k3, >= 0
        per_token = per_token + kl_coef * kl
    loss = (per_token * m).sum() / denom
    with torch.no_grad():
        n = count.clamp(min=1.0)
        clip_active = (clipped > unclipped) & m.bool()
        terms = LossTerms(
            loss=loss,
            pg_loss=(pg * m).sum() / n,
            kl=(kl * m).sum() / n,
            clip_fraction=clip_active.sum() / n,
            dual_clip_fraction=(dual_active & m.bool()).sum() / n,
            ratio_mean=(ratio * m).sum() / n,
        )
    return terms._replace(loss=loss)
