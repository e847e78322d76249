"""The importance-ratio record of a training step: how far the trained policy is from the one that
sampled each token, and which tokens are farthest.

Two ratios per trained token: the loss's (the token's logprob under the distribution it was drawn
from: the grammar's allowed tokens renormalized, see docs/trainer.md "Tool-call grammar") and the
unconstrained one (the model's whole softmax on both sides: what the first ablation's runs
trained against), kept as a diagnostic. :class:`RatioRecord` accumulates a step's micro-batches.
Shapes: ``R`` rows, ``K`` trained columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["RatioRecord"]


@dataclass
class RatioRecord:
    """One step's largest |log ratio| and count of |log ratio| > 1 for both ratios, and its
    ``top`` tokens by either ratio (:meth:`outliers`)."""

    top: int = 3
    log_ratio_abs_max: float = 0.0
    log_ratio_over_1: float = 0.0
    free_log_ratio_abs_max: float = 0.0
    free_log_ratio_over_1: float = 0.0
    tokens: list[dict[str, Any]] = field(default_factory=list)

    @torch.no_grad()
    def add(
        self,
        rows: dict[str, torch.Tensor],
        cols: torch.Tensor,
        logp: torch.Tensor,
        free: torch.Tensor,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        """One micro-batch: ``rows`` as the loss takes them (``input_ids``, ``loss_mask``,
        ``old_logprobs``, ``old_free_logprobs``, optionally ``allowed_at``), ``cols`` (K,) the
        trained columns, ``logp`` / ``free`` (R, K) the trained policy's logprobs of both kinds."""
        m = rows["loss_mask"][:, cols].bool()  # (R, K)
        ratio = (logp.detach().float() - rows["old_logprobs"][:, cols]) * m  # (R, K)
        free_ratio = (free.float() - rows["old_free_logprobs"][:, cols]) * m  # (R, K)
        if not bool(m.any()):
            return
        for name, values in (("log_ratio", ratio), ("free_log_ratio", free_ratio)):
            peak = float(values.abs().max())
            setattr(self, f"{name}_abs_max", max(getattr(self, f"{name}_abs_max"), peak))
            setattr(self, f"{name}_over_1", getattr(self, f"{name}_over_1") + float((values.abs() > 1.0).sum()))
        restricted = torch.zeros_like(m)  # (R, K) tokens the grammar restricted
        at = rows.get("allowed_at")
        if at is not None and at.numel():
            restricted[at[:, 0], torch.searchsorted(cols, at[:, 1].contiguous())] = True
        width, n = m.shape[1], min(self.top, int(m.sum()))
        # untrained positions rank below every trained one (a trained token's |log ratio| may be 0 too)
        picked = {
            i for values in (ratio, free_ratio) for i in values.abs().masked_fill(~m, -1.0).flatten().topk(n).indices.tolist()
        }
        for flat in sorted(picked):
            r, k = divmod(flat, width)
            c = int(cols[k])  # the token's column
            token = int(rows["input_ids"][r, c])
            self.tokens.append(
                {
                    "token": token,
                    "text": decode([token]) if decode is not None else None,
                    "log_ratio": float(ratio[r, k]),
                    "free_log_ratio": float(free_ratio[r, k]),
                    "old_logprob": float(rows["old_logprobs"][r, c]),
                    "old_free_logprob": float(rows["old_free_logprobs"][r, c]),
                    "grammar_restricted": bool(restricted[r, k]),
                }
            )

    def metrics(self) -> dict[str, float]:
        """The step's figures, named as the step log has them (under ``loss/``)."""
        return {
            "log_ratio_abs_max": self.log_ratio_abs_max,
            "log_ratio_over_1": self.log_ratio_over_1,
            "free_log_ratio_abs_max": self.free_log_ratio_abs_max,
            "free_log_ratio_over_1": self.free_log_ratio_over_1,
        }

    def outliers(self, step: int) -> dict[str, Any]:
        """The step's ``top`` tokens by |log ratio| and by |unconstrained log ratio|."""
        return {
            "step": step,
            "largest": sorted(self.tokens, key=lambda t: -abs(t["log_ratio"]))[: self.top],
            "largest_unconstrained": sorted(self.tokens, key=lambda t: -abs(t["free_log_ratio"]))[: self.top],
        }
