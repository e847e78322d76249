"""build_batch on hand-made groups, the GroupBuffer and the TaskSampler."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
import torch

from agentrl_trainer.batch import TrainBatch, build_batch, micro_batches
from agentrl_trainer.pipeline import Group, GroupBuffer, TaskSampler
from agentrl_trainer.rollout import Episode, EpisodeSpec
from agentrl_trainer.trajectory import Segment

PAD = 0
INV_SQRT2 = 0.7071068


@dataclass
class Traj:
    """What build_batch reads of a TokenTrajectory: its segments."""

    segments: list[Segment] = field(default_factory=list)


def seg(ids: list[int], mask: list[int], logprobs: list[float] | None = None) -> Segment:
    lps = logprobs if logprobs is not None else [-0.5 if m else 0.0 for m in mask]
    return Segment(list(ids), list(mask), list(lps))


def episode(
    task: str, group: int, eid: int, reward: float, segments: list[Segment], status: str = "completed", infra: bool = False
) -> Episode:
    return Episode(EpisodeSpec(task, group, group, eid), status, reward, infra, Traj(segments))  # type: ignore[arg-type]


def group(gid: int, task: str, episodes: list[Episode]) -> Group:
    return Group(gid, task, gid, episodes)


def approx(values: list[float]):
    return pytest.approx(values, abs=1e-5)


# Group 0 of task "a": rewards [1, 0] -> group advantages [+0.7071, -0.7071]
#   e0: ids [5, 6, 7, 8], mask [0, 1, 1, 0], logprobs [0, -0.5, -0.25, 0]
#   e1: ids [5, 6, 9],    mask [0, 0, 1],    logprobs [0, 0, -1]
def two_episodes() -> list[Group]:
    e0 = episode("a", 0, 0, 1.0, [seg([5, 6, 7, 8], [0, 1, 1, 0], [0.0, -0.5, -0.25, 0.0])])
    e1 = episode("a", 0, 1, 0.0, [seg([5, 6, 9], [0, 0, 1], [0.0, 0.0, -1.0])])
    return [group(0, "a", [e0, e1])]


def test_padding_masks_and_old_logprobs() -> None:
    b = build_batch(two_episodes(), pad_token_id=PAD, task_norm=False)
    assert b.input_ids.tolist() == [[5, 6, 7, 8], [5, 6, 9, PAD]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert b.loss_mask.tolist() == [[0, 1, 1, 0], [0, 0, 1, 0]]
    assert b.old_logprobs.tolist() == [[0.0, -0.5, -0.25, 0.0], [0.0, 0.0, -1.0, 0.0]]
    assert b.row_episode == [0, 1] and b.row_task == ["a", "a"]
    assert b.rewards.tolist() == [1.0, 0.0]


def test_episode_advantage_broadcast_over_its_trained_tokens() -> None:
    b = build_batch(two_episodes(), pad_token_id=PAD, task_norm=False)
    assert b.advantages[0].tolist() == approx([0.0, INV_SQRT2, INV_SQRT2, 0.0])
    assert b.advantages[1].tolist() == approx([0.0, 0.0, -INV_SQRT2, 0.0])


def test_unscaled_rewards_only_centre() -> None:
    b = build_batch(two_episodes(), pad_token_id=PAD, task_norm=False, scale_rewards=False)
    assert b.advantages[0].tolist() == approx([0.0, 0.5, 0.5, 0.0])
    assert b.advantages[1].tolist() == approx([0.0, 0.0, -0.5, 0.0])


def test_task_normalization_applied() -> None:
    # token values [.7071, .7071, -.7071]: mean .2357, population std .6667 -> [.7071, .7071, -1.4142]
    b = build_batch(two_episodes(), pad_token_id=PAD)
    assert b.advantages[0].tolist() == approx([0.0, INV_SQRT2, INV_SQRT2, 0.0])
    assert b.advantages[1].tolist() == approx([0.0, 0.0, -1.4142136, 0.0])
    values = b.advantages[b.loss_mask.bool()].double()
    assert float(values.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(values.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)


def test_task_normalization_is_per_task() -> None:
    # task "a" as above; task "b": rewards [3, 1, 2] -> centred [1, -1, 0] / std 1 -> [1, -1, 0]
    # task b tokens: [1, 1, -1, 0] (e2 has 2 trained tokens): mean 0.25, pop std 0.829156
    b_eps = [
        episode("b", 1, 2, 3.0, [seg([1, 2, 3], [0, 1, 1])]),
        episode("b", 1, 3, 1.0, [seg([1, 4], [0, 1])]),
        episode("b", 1, 4, 2.0, [seg([1, 5], [0, 1])]),
    ]
    b = build_batch([*two_episodes(), group(1, "b", b_eps)], pad_token_id=PAD)
    assert b.row_task == ["a", "a", "b", "b", "b"]
    assert b.advantages[2].tolist() == approx([0.0, 0.904534, 0.904534, 0.0])
    assert b.advantages[3].tolist() == approx([0.0, -1.507557, 0.0, 0.0])
    assert b.advantages[4].tolist() == approx([0.0, -0.301511, 0.0, 0.0])
    for task in ("a", "b"):
        rows = [i for i, t in enumerate(b.row_task) if t == task]
        values = b.advantages[rows][b.loss_mask[rows].bool()].double()
        assert float(values.mean()) == pytest.approx(0.0, abs=1e-6)
        assert float(values.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert (b.advantages[~b.loss_mask.bool()] == 0).all()


def test_incomplete_episode_is_shaped_to_the_penalty() -> None:
    e0 = episode("a", 0, 0, 1.0, [seg([1, 2], [0, 1])])
    e1 = episode("a", 0, 1, 1.0, [seg([1, 3], [0, 1])], status="task limit reached")
    b = build_batch([group(0, "a", [e0, e1])], pad_token_id=PAD, task_norm=False)
    assert b.rewards.tolist() == approx([1.0, -0.2])
    assert b.advantages[:, 1].tolist() == approx([INV_SQRT2, -INV_SQRT2])
    kept = build_batch([group(0, "a", [e0, e1])], pad_token_id=PAD, task_norm=False, incomplete_reward=None)
    assert kept.rewards.tolist() == [1.0, 1.0]
    assert kept.advantages.abs().sum() == 0


def test_given_rewards_override_the_episodes() -> None:
    b = build_batch(two_episodes(), [0.0, 2.0], pad_token_id=PAD, task_norm=False)
    assert b.rewards.tolist() == [0.0, 2.0]
    assert b.advantages[1].tolist() == approx([0.0, 0.0, INV_SQRT2, 0.0])
    with pytest.raises(ValueError, match="1 rewards for 2 episodes"):
        build_batch(two_episodes(), [1.0], pad_token_id=PAD)


def test_forked_episode_gives_rows_with_the_same_advantage() -> None:
    e0 = episode("a", 0, 0, 1.0, [seg([1, 2], [0, 1]), seg([1, 2, 3, 4], [0, 0, 1, 1]), seg([7], [0])])
    e1 = episode("a", 0, 1, 0.0, [seg([1, 5, 6], [0, 1, 1])])
    b = build_batch([group(0, "a", [e0, e1])], pad_token_id=PAD, task_norm=False)
    assert b.row_episode == [0, 0, 1]  # the untrained third segment of e0 is no row
    assert b.input_ids.tolist() == [[1, 2, PAD, PAD], [1, 2, 3, 4], [1, 5, 6, PAD]]
    assert b.advantages.tolist()[0] == approx([0.0, INV_SQRT2, 0.0, 0.0])
    assert b.advantages.tolist()[1] == approx([0.0, 0.0, INV_SQRT2, INV_SQRT2])
    assert b.advantages.tolist()[2] == approx([0.0, -INV_SQRT2, -INV_SQRT2, 0.0])
    normed = build_batch([group(0, "a", [e0, e1])], pad_token_id=PAD)
    adv = normed.advantages[normed.loss_mask.bool()]
    # token values [x, x, x, -x, -x] (x = .7071): mean x/5, population std .6928 ->
    # e0's 3 tokens (on both of its rows) sqrt(2/3) = 0.816497, e1's 2 tokens -sqrt(3/2) = -1.224745
    assert adv[:3].tolist() == approx([0.816497] * 3)
    assert adv[3:].tolist() == approx([-1.224745] * 2)


def test_rows_trims_to_the_longest_sequence() -> None:
    b = build_batch(two_episodes(), pad_token_id=PAD, task_norm=False)
    rows = b.rows(1, 2)
    assert rows["input_ids"].tolist() == [[5, 6, 9]]
    assert rows["loss_mask"].tolist() == [[0, 0, 1]]
    assert rows["old_logprobs"].tolist() == [[0.0, 0.0, -1.0]]
    assert set(rows) == {
        "input_ids", "attention_mask", "loss_mask", "old_logprobs", "old_free_logprobs", "advantages", "allowed_at", "allowed_bits",
    }  # fmt: skip
    assert rows["old_free_logprobs"].tolist() == rows["old_logprobs"].tolist()  # no grammar: the same
    assert rows["allowed_at"].shape == (0, 2)
    # row 0's last token (8) follows its last trained token: it cannot change a trained logprob
    assert b.rows(0, 2)["input_ids"].tolist() == [[5, 6, 7], [5, 6, 9]]
    assert b.row_lengths().tolist() == [3, 3]


def test_grammar_restricted_tokens_keep_their_allowed_set_through_the_batch() -> None:
    """A trained token the grammar restricted carries its packed allowed set and its unconstrained
    logprob into the batch; a micro-batch of some rows gets their entries renumbered."""
    restricted_a, restricted_b = torch.tensor([3], dtype=torch.uint8), torch.tensor([5], dtype=torch.uint8)
    s0 = Segment()
    s0.extend([5, 6], 0)
    s0.extend([7, 8], 1, [-0.1, 0.0], allowed=[restricted_a, None], free_logprobs=[-2.0, -0.3])
    s1 = Segment()
    s1.extend([5], 0)
    s1.extend([9], 1, [-0.7], allowed=[restricted_b], free_logprobs=[-0.9])
    g = group(0, "a", [episode("a", 0, 0, 1.0, [s0]), episode("a", 0, 1, 0.0, [s1])])
    b = build_batch([g], pad_token_id=PAD, task_norm=False)
    assert b.allowed_at.tolist() == [[0, 2], [1, 1]] and b.allowed_bits.tolist() == [[3], [5]]
    assert b.old_logprobs[0].tolist() == approx([0.0, 0.0, -0.1, 0.0])
    assert b.old_free_logprobs[0].tolist() == approx([0.0, 0.0, -2.0, -0.3])
    swapped = b.select([1, 0])
    assert swapped["allowed_at"].tolist() == [[1, 2], [0, 1]] and swapped["allowed_bits"].tolist() == [[3], [5]]
    alone = b.select([1])
    assert alone["allowed_at"].tolist() == [[0, 1]] and alone["allowed_bits"].tolist() == [[5]]
    with pytest.raises(ValueError, match="3 ids but 2 allowed"):
        Segment().extend([1, 2, 3], 1, [0.0] * 3, allowed=[None, None])


def test_micro_batches_cap_rows_and_padded_tokens() -> None:
    lengths = [100, 90, 400, 50, 60, 1000, 10]
    order = [6, 0, 1, 3, 4, 2, 5]
    assert micro_batches(order, lengths, max_rows=3) == [[6, 0, 1], [3, 4, 2], [5]]
    # padded tokens = rows x longest: [6,0,1] is 3 x 100 = 300; adding 3 would be fine (4 x 100),
    # but max_rows caps at 3; then 3, 4 (2 x 60 = 120), 2 makes 3 x 400 = 1200 > 500
    assert micro_batches(order, lengths, max_rows=3, max_tokens=500) == [[6, 0, 1], [3, 4], [2], [5]]
    # a row longer than the cap goes alone; no row is lost or repeated
    chunks = micro_batches(order, lengths, max_rows=8, max_tokens=200)
    assert chunks == [[6, 0], [1, 3], [4], [2], [5]]
    assert sorted(r for c in chunks for r in c) == sorted(order)
    assert all(len(c) * max(lengths[r] for r in c) <= 200 or len(c) == 1 for c in chunks)


def test_micro_batches_with_prefixes_count_a_shared_head_once_and_cut_where_sharing_stops() -> None:
    head_a, head_b = list(range(100, 180)), list(range(200, 280))  # two tasks' 80-token heads
    prefixes = [head_a + [1], head_a + [2], head_a + [3], head_b + [4], head_b + [5], head_a[:10] + [9]]
    lengths = [100, 110, 105, 90, 95, 50]
    order = [0, 1, 2, 3, 4, 5]
    # [0, 1, 2] share 80 tokens: 80 + 3 x (110 - 80) = 170 computed; without prefixes 3 x 110 = 330
    assert micro_batches(order, lengths, max_rows=8, max_tokens=200, prefixes=prefixes)[0] == [0, 1, 2]
    assert micro_batches(order, lengths, max_rows=8, max_tokens=200)[0] == [0]
    # row 3 shares nothing with [0, 1, 2] (a micro-batch of 4 would compute 4 x 110 = 440 tokens
    # for its 90): it starts the next micro-batch, which row 4 joins; row 5 shares nothing with
    # [3, 4] (3 x 95 padded for its 50), so it goes alone
    chunks = micro_batches(order, lengths, max_rows=8, max_tokens=0, prefixes=prefixes)
    assert chunks == [[0, 1, 2], [3, 4], [5]]
    # the row cap still holds, and no row is lost or repeated
    chunks = micro_batches(order, lengths, max_rows=2, max_tokens=0, prefixes=prefixes)
    assert chunks == [[0, 1], [2], [3, 4], [5]]
    assert sorted(r for c in chunks for r in c) == order


def test_head_prefixes_are_the_tokens_before_each_rows_first_trained_one() -> None:
    b = TrainBatch(
        input_ids=torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0]]),
        attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        loss_mask=torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]]),
        old_logprobs=torch.zeros(2, 4),
        advantages=torch.zeros(2, 4),
        row_task=["a", "a"],
        row_episode=[0, 1],
        episodes=[],
        rewards=torch.zeros(2),
    )
    assert b.head_prefixes() == [(5, 6), (5, 6, 9)]  # a row without trained tokens: all of it


def test_build_batch_rejects_unusable_input() -> None:
    with pytest.raises(ValueError, match="trajectories"):
        build_batch([], pad_token_id=PAD)
    no_traj = Episode(EpisodeSpec("a", 0, 0, 0), "completed", 1.0, False, None)
    with pytest.raises(ValueError, match="trajectories"):
        build_batch([group(0, "a", [no_traj])], pad_token_id=PAD)
    untrained = episode("a", 0, 0, 1.0, [seg([1, 2], [0, 0])])
    with pytest.raises(ValueError, match="no episode has a trained token"):
        build_batch([group(0, "a", [untrained])], pad_token_id=PAD)


def test_dtypes() -> None:
    b = build_batch(two_episodes(), pad_token_id=PAD)
    assert b.input_ids.dtype == b.attention_mask.dtype == b.loss_mask.dtype == torch.long
    assert b.old_logprobs.dtype == b.advantages.dtype == torch.float32


# --------------------------------------------------------------------------- GroupBuffer


def ep(gid: int, eid: int, infra: bool = False, task: str = "db") -> Episode:
    return Episode(EpisodeSpec(task, 10 + gid, gid, eid), "cancelled" if infra else "completed", 1.0, infra, Traj())  # type: ignore[arg-type]


def test_group_buffer_releases_only_complete_groups() -> None:
    buf = GroupBuffer(group_size=3)
    assert buf.add(ep(0, 0)) is None
    assert buf.add(ep(1, 1)) is None
    assert buf.add(ep(0, 2)) is None
    assert buf.incomplete == 2
    g = buf.add(ep(0, 3))
    assert g is not None
    assert (g.group_id, g.task, g.index, g.dropped) == (0, "db", 10, 0)
    assert [e.spec.episode_id for e in g.episodes] == [0, 2, 3]
    assert buf.incomplete == 1
    assert buf.add(ep(1, 4)) is None
    g1 = buf.add(ep(1, 5))
    assert g1 is not None and [e.spec.episode_id for e in g1.episodes] == [1, 4, 5]
    assert buf.incomplete == 0 and buf.discarded == 0


def test_group_buffer_drops_infrastructure_failures() -> None:
    buf = GroupBuffer(group_size=3, min_valid=2)
    buf.add(ep(0, 0))
    buf.add(ep(0, 1, infra=True))
    g = buf.add(ep(0, 2))
    assert g is not None
    assert [e.spec.episode_id for e in g.episodes] == [0, 2]
    assert g.dropped == 1 and buf.discarded == 0


def test_group_buffer_discards_a_group_below_min_valid() -> None:
    buf = GroupBuffer(group_size=3, min_valid=2)
    buf.add(ep(0, 0, infra=True))
    buf.add(ep(0, 1))
    assert buf.add(ep(0, 2, infra=True)) is None
    assert buf.discarded == 1 and buf.incomplete == 0


def test_group_buffer_min_valid_is_capped_by_group_size() -> None:
    buf = GroupBuffer(group_size=1, min_valid=2)
    g = buf.add(ep(4, 0))
    assert g is not None and len(g.episodes) == 1
    with pytest.raises(ValueError, match="group_size"):
        GroupBuffer(group_size=0)


# --------------------------------------------------------------------------- TaskSampler


def test_task_sampler_cycles_through_all_indices() -> None:
    sampler = TaskSampler({"a": [0, 1, 2], "b": [7]}, {"a": 1.0, "b": 0.0}, seed=3)
    draws = [sampler.draw() for _ in range(9)]
    assert {t for t, _ in draws} == {"a"}
    for k in range(3):  # each block of 3 is a permutation of the indices
        assert sorted(i for _, i in draws[3 * k : 3 * k + 3]) == [0, 1, 2]


def test_task_sampler_respects_weights() -> None:
    sampler = TaskSampler({"a": [0, 1], "b": [5, 6, 7]}, {"a": 3.0, "b": 1.0}, seed=0)
    counts = Counter(sampler.draw()[0] for _ in range(4000))
    assert abs(counts["a"] - 3000) < 150  # binomial sd ≈ 27
    assert counts["a"] + counts["b"] == 4000


def test_task_sampler_defaults_to_equal_weights_and_is_seeded() -> None:
    sampler = TaskSampler({"a": [0], "b": [1]}, seed=1)
    assert sampler.weights == [1.0, 1.0]
    draws = [sampler.draw() for _ in range(2000)]
    assert abs(sum(t == "a" for t, _ in draws) - 1000) < 120
    again = TaskSampler({"a": [0], "b": [1]}, seed=1)
    assert [again.draw() for _ in range(2000)] == draws
    other = TaskSampler({"a": [0], "b": [1]}, seed=2)
    assert [other.draw() for _ in range(2000)] != draws


@pytest.mark.parametrize(
    ("indices", "weights", "match"),
    [
        ({"a": [0]}, {"a": -1.0}, "weights must be >= 0"),
        ({"a": [0], "b": [1]}, {"a": 0.0, "b": 0.0}, "positive sum"),
        ({"a": [0]}, {"z": 1.0}, "not sampled"),
        ({"a": []}, None, "at least one sample index"),
        ({}, None, "at least one sample index"),
    ],
)
def test_task_sampler_rejects_bad_weights(indices: dict, weights: dict | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TaskSampler(indices, weights)
