"""From complete GRPO groups to the padded tensors of one training step.

Rewards (given, or shaped here: incomplete episodes get ``incomplete_reward``) are turned into GRPO group
advantages per episode, broadcast over each episode's trained tokens and, with
``task_norm``, normalized within each task (:mod:`agentrl_trainer.advantages`). An episode may
span several rows (see :mod:`agentrl_trainer.trajectory` on forks); every row carries its
episode's advantage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl_envs.chat.decode import shared_head_length

from .advantages import broadcast_to_tokens, group_advantages, normalize_by_task, shape_reward
from .pipeline import Group
from .rollout import Episode

__all__ = ["ROW_TENSORS", "TrainBatch", "build_batch", "micro_batches", "select_rows"]


#: the (R, T) tensors a micro-batch takes by row
ROW_TENSORS = ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "old_free_logprobs", "advantages")


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (R, T) right-padded
    attention_mask: torch.Tensor  # (R, T)
    loss_mask: torch.Tensor  # (R, T) 1 on sampled tokens
    old_logprobs: torch.Tensor  # (R, T) the producing engine's behaviour logprob of each sampled token
    advantages: torch.Tensor  # (R, T) 0 off-mask
    row_task: list[str]
    row_episode: list[int]
    episodes: list[Episode]
    rewards: torch.Tensor  # (E,) shaped rewards
    # (R, T) the producing engine's unconstrained logprob (= old_logprobs where no grammar restricted)
    old_free_logprobs: torch.Tensor | None = None
    # the trained tokens the grammar restricted: (M, 2) their (row, column), (M, W) the packed
    # tokens each was drawn from (agentrl_envs.chat.decode.pack_token_mask)
    allowed_at: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 2), dtype=torch.long))
    allowed_bits: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 0), dtype=torch.uint8))

    def __post_init__(self) -> None:
        if self.old_free_logprobs is None:
            self.old_free_logprobs = self.old_logprobs

    def rows(self, start: int, stop: int) -> dict[str, torch.Tensor]:
        """Rows [start, stop) trimmed to their longest sequence, as the loss takes them."""
        return self.select(list(range(start, stop)))

    def select(self, rows: list[int]) -> dict[str, torch.Tensor]:
        """The given rows (in that order) trimmed to their longest sequence up to its last trained
        token (what follows it cannot change a trained token's logprob), as the loss takes them;
        ``allowed_at`` / ``allowed_bits`` hold the selected rows' restricted tokens, renumbered."""
        return select_rows(self, rows)

    def head_prefixes(self) -> list[tuple[int, ...]]:
        """Each row's tokens before its first trained one (what rows may share as a head)."""
        first = torch.where(self.loss_mask.bool().any(dim=1), self.loss_mask.argmax(dim=1), self.row_lengths())
        return [tuple(self.input_ids[r, : int(first[r])].tolist()) for r in range(self.input_ids.shape[0])]

    def row_lengths(self) -> torch.Tensor:
        """(R,) the columns each row needs: through its last trained token (its whole sequence
        when it has none)."""
        T = self.loss_mask.shape[1]
        cols = torch.arange(1, T + 1)
        last_trained = (self.loss_mask.bool() * cols).amax(dim=1)
        return torch.where(last_trained > 0, last_trained, self.attention_mask.sum(dim=1))


def select_rows(batch: Any, rows: list[int]) -> dict[str, torch.Tensor]:
    """:meth:`TrainBatch.select` for any object with the :data:`ROW_TENSORS`, ``row_lengths()``
    and (optionally) ``allowed_at`` / ``allowed_bits``."""
    index = torch.tensor(rows, dtype=torch.long)
    width = int(batch.row_lengths()[index].max())
    out = {k: getattr(batch, k)[index, :width] for k in ROW_TENSORS}
    at: torch.Tensor = getattr(batch, "allowed_at", torch.zeros((0, 2), dtype=torch.long))
    bits: torch.Tensor = getattr(batch, "allowed_bits", torch.zeros((0, 0), dtype=torch.uint8))
    where = torch.full((batch.input_ids.shape[0],), -1, dtype=torch.long)  # (R,) old row -> new row
    where[index] = torch.arange(len(rows))
    new_rows = where[at[:, 0]] if at.numel() else torch.zeros(0, dtype=torch.long)  # (M,)
    keep = new_rows >= 0
    out["allowed_at"] = torch.stack([new_rows[keep], at[keep, 1]], dim=1) if at.numel() else at
    out["allowed_bits"] = bits[keep] if at.numel() else bits
    return out


def micro_batches(
    order: Sequence[int],
    lengths: Sequence[int],
    max_rows: int,
    max_tokens: int = 0,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[list[int]]:
    """Split ``order`` (row indices, kept in that order) into micro-batches of at most
    ``max_rows`` rows and, when ``max_tokens`` > 0, at most ``max_tokens`` tokens computed (a row
    longer than that goes alone). Activation memory grows with the tokens, not the rows: on the
    2-core CPU, SmolLM2-135M + LoRA held ~2 MB a token in a forward/backward (8 rows x 1,024
    tokens: 16 GB; a five-task demo step was OOM-killed at 23 GB).

    Without ``prefixes`` a micro-batch computes rows x its longest row (padded) tokens. With
    ``prefixes`` (each row's tokens before its first trained one, which the forward may share;
    :func:`agentrl_trainer.logprobs.token_logprobs`) it computes the rows' shared head once:
    head + rows x (longest - head). A row then joins the current micro-batch only if that adds
    at most half its own length — else it starts the next one, where the rows after it may share
    its head. (The five-task demo's steps had micro-batches that mixed two tasks' rows and so
    shared nothing: 14 s where a one-task one took 4 s; ``benchmarks/train_step.py``.)
    """

    def cost(rows: list[int]) -> int:
        width = max(int(lengths[r]) for r in rows)
        if prefixes is None:
            return width * len(rows)
        if len(rows) == 1:
            return width
        head = shared_head_length([prefixes[r] for r in rows], width)
        return head + len(rows) * (width - head)

    chunks: list[list[int]] = []
    current: list[int] = []
    current_cost = 0
    for row in order:
        joined = cost([*current, row])
        if current:
            fits = len(current) < max_rows and (max_tokens <= 0 or joined <= max_tokens)
            worth = prefixes is None or joined - current_cost <= int(lengths[row]) // 2
            if not (fits and worth):
                chunks.append(current)
                current, joined = [], int(lengths[row])
        current.append(row)
        current_cost = joined
    if current:
        chunks.append(current)
    return chunks


def build_batch(
    groups: Sequence[Group],
    rewards: Sequence[float] | None = None,
    *,
    pad_token_id: int,
    incomplete_reward: float | None = -0.2,
    scale_rewards: bool = True,
    task_norm: bool = True,
) -> TrainBatch:
    episodes = [e for g in groups for e in g.episodes]
    if not episodes or any(e.trajectory is None for e in episodes):
        raise ValueError("groups must hold episodes with trajectories (infrastructure failures are dropped before)")
    if rewards is None:
        rewards = [shape_reward(e.reward, e.completed, incomplete_reward) for e in episodes]
    if len(rewards) != len(episodes):
        raise ValueError(f"{len(rewards)} rewards for {len(episodes)} episodes")
    reward_t = torch.tensor(list(rewards), dtype=torch.float32)  # (E,)
    ep_adv = group_advantages(reward_t, [e.spec.group_id for e in episodes], scale=scale_rewards)  # (E,)
    segments, row_episode = [], []
    for i, e in enumerate(episodes):
        assert e.trajectory is not None
        for seg in e.trajectory.segments:
            if any(seg.loss_mask):
                segments.append(seg)
                row_episode.append(i)
    if not segments:
        raise ValueError("no episode has a trained token")
    R, T = len(segments), max(len(s.input_ids) for s in segments)
    input_ids = torch.full((R, T), pad_token_id, dtype=torch.long)  # (R, T)
    attention = torch.zeros((R, T), dtype=torch.long)  # (R, T)
    loss_mask = torch.zeros((R, T), dtype=torch.long)  # (R, T)
    old_lp = torch.zeros((R, T), dtype=torch.float32)  # (R, T)
    old_free = torch.zeros((R, T), dtype=torch.float32)  # (R, T)
    at: list[tuple[int, int]] = []
    bits: list[torch.Tensor] = []
    for r, s in enumerate(segments):
        n = len(s.input_ids)
        input_ids[r, :n] = torch.tensor(s.input_ids)
        attention[r, :n] = 1
        loss_mask[r, :n] = torch.tensor(s.loss_mask)
        old_lp[r, :n] = torch.tensor(s.logprobs)
        old_free[r, :n] = torch.tensor(s.free_logprobs if len(s.free_logprobs) == n else s.logprobs)
        for pos, packed in sorted(s.allowed.items()):
            if s.loss_mask[pos]:
                at.append((r, pos))
                bits.append(packed)
    row_task = [episodes[i].spec.task for i in row_episode]
    adv = broadcast_to_tokens(ep_adv[torch.tensor(row_episode)], loss_mask)  # (R, T)
    if task_norm:
        adv = normalize_by_task(adv, loss_mask, row_task)
    allowed_at = torch.tensor(at, dtype=torch.long).reshape(-1, 2)  # (M, 2)
    allowed_bits = torch.stack(bits) if bits else torch.zeros((0, 0), dtype=torch.uint8)  # (M, W)
    return TrainBatch(
        input_ids,
        attention,
        loss_mask,
        old_lp,
        adv,
        row_task,
        row_episode,
        episodes,
        reward_t,
        old_free,
        allowed_at,
        allowed_bits,
    )
