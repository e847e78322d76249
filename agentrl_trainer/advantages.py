"""Advantages: GRPO group advantages and AgentRL's task advantage normalization.

Pure functions over tensors, no trainer state, so each one can be checked by hand.

Shapes: ``B`` episodes (rows), ``T`` tokens per row (padded). A row's ``loss_mask`` is 1 on the
tokens its policy produced (the ones the loss trains) and 0 on prompt, environment, forced and
padding tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = ["broadcast_to_tokens", "group_advantages", "normalize_by_task", "shape_reward"]


def shape_reward(reward: float, completed: bool, incomplete_reward: float | None) -> float:
    """The reward an episode is trained on.

    AgentRL gives an episode that did not end in ``completed`` (turn limit, invalid action,
    context limit) a fixed penalty instead of its task reward; ``incomplete_reward=None`` keeps
    the task reward unchanged.
    """
    if completed or incomplete_reward is None:
        return float(reward)
    return float(incomplete_reward)


def group_advantages(
    rewards: torch.Tensor, group_ids: Sequence[Hashable], *, scale: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantages: each reward minus its group's mean, divided by the group's std if ``scale``.

    ``rewards``: (B,). ``group_ids``: one hashable per row; rows with the same id were sampled
    from the same prompt. The std is the sample std (Bessel-corrected, as DeepSeekMath and TRL);
    a group of one row, or one whose rewards are all equal, gets advantage 0. Returns (B,).
    """
    rewards = rewards.to(torch.float64)  # (B,)
    if rewards.dim() != 1 or len(group_ids) != rewards.shape[0]:
        raise ValueError(f"rewards must be (B,) with one group id per row; got {tuple(rewards.shape)} and {len(group_ids)} ids")
    out = torch.zeros_like(rewards)  # (B,)
    for gid in dict.fromkeys(group_ids):
        rows = torch.tensor([i for i, g in enumerate(group_ids) if g == gid])  # (G,)
        r = rewards[rows]  # (G,)
        centred = r - r.mean()
        if scale and len(rows) > 1:
            centred = centred / (r.std(unbiased=True) + eps)
        out[rows] = centred
    return out.to(torch.float32)


def broadcast_to_tokens(episode_advantages: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Each episode's advantage on each of its loss-masked tokens, 0 elsewhere. (B,), (B, T) -> (B, T)"""
    if episode_advantages.dim() != 1 or loss_mask.dim() != 2 or loss_mask.shape[0] != episode_advantages.shape[0]:
        raise ValueError(f"need (B,) and (B, T); got {tuple(episode_advantages.shape)} and {tuple(loss_mask.shape)}")
    return episode_advantages[:, None].to(torch.float32) * loss_mask.to(torch.float32)  # (B, T)


def normalize_by_task(
    advantages: torch.Tensor, loss_mask: torch.Tensor, task_ids: Sequence[Hashable], eps: float = 1e-6
) -> torch.Tensor:
    """Task advantage normalization: Â = (A − μ_task) / (σ_task + ε) over each task's masked tokens.

    ``advantages`` and ``loss_mask``: (B, T); ``task_ids``: one per row. μ and σ (population
    std) are taken over all loss-masked tokens of the rows of one task, so a task with long
    episodes weighs by its tokens, as in AgentRL. The result is 0 wherever the mask is 0; a task
    with no masked token leaves its rows at 0. Returns (B, T) float32.
    """
    if advantages.shape != loss_mask.shape or advantages.dim() != 2:
        raise ValueError(
            f"advantages and loss_mask must both be (B, T); got {tuple(advantages.shape)} and {tuple(loss_mask.shape)}"
        )
    if len(task_ids) != advantages.shape[0]:
        raise ValueError(f"one task id per row: {advantages.shape[0]} rows, {len(task_ids)} ids")
    adv = advantages.to(torch.float64)  # (B, T)
    mask = loss_mask.to(torch.bool)  # (B, T)
    out = torch.zeros_like(adv)  # (B, T)
    for task in dict.fromkeys(task_ids):
        rows = torch.tensor([i for i, t in enumerate(task_ids) if t == task])  # (R,)
        sel = torch.zeros_like(mask)
        sel[rows] = mask[rows]  # (B, T): this task's trained tokens
        values = adv[sel]  # (N,)
        if values.numel() == 0:
            continue
        mu = values.mean()
        sigma = values.std(unbiased=False)
        out[sel] = (values - mu) / (sigma + eps)
    return out.to(torch.float32)
