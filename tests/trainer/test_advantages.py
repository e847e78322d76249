"""GRPO group advantages, task advantage normalization and reward shaping, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from agentrl_trainer.advantages import broadcast_to_tokens, group_advantages, normalize_by_task, shape_reward

# sample std of [1, 0, 0, 1] is sqrt(1/3) = 0.57735; 0.5 / 0.57735 = 0.866025
SQRT3_2 = 0.8660254
INV_SQRT2 = 0.7071068


def approx(values: list[float], abs: float = 1e-5):  # noqa: A002
    return pytest.approx(values, abs=abs)


# --------------------------------------------------------------------------- shape_reward


def test_shape_reward_keeps_completed_and_penalizes_incomplete() -> None:
    assert shape_reward(0.7, True, -0.2) == 0.7
    assert shape_reward(0.7, False, -0.2) == -0.2
    assert shape_reward(0.0, False, -0.5) == -0.5


def test_shape_reward_none_keeps_the_task_reward() -> None:
    assert shape_reward(0.7, False, None) == 0.7
    out = shape_reward(1, True, -0.2)
    assert isinstance(out, float) and out == 1.0


# --------------------------------------------------------------------------- group_advantages


def test_group_advantages_one_group_sample_std() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), [7, 7, 7, 7])
    assert adv.dtype == torch.float32
    assert adv.tolist() == approx([SQRT3_2, -SQRT3_2, -SQRT3_2, SQRT3_2])


def test_group_advantages_interleaved_groups() -> None:
    # group "x": [2, 4] -> mean 3, sample std sqrt(2) -> -/+ 0.7071; group "y": all 10 -> 0
    adv = group_advantages(torch.tensor([2.0, 10.0, 4.0, 10.0]), ["x", "y", "x", "y"])
    assert adv.tolist() == approx([-INV_SQRT2, 0.0, INV_SQRT2, 0.0])


def test_group_advantages_three_groups() -> None:
    # a: [1, 0] -> +/-0.7071; b: [0.5, 0.5] -> 0; c: [3, 1] mean 2, std sqrt(2) -> +/-0.7071
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 3.0, 1.0]), ["a", "a", "b", "b", "c", "c"])
    assert adv.tolist() == approx([INV_SQRT2, -INV_SQRT2, 0.0, 0.0, INV_SQRT2, -INV_SQRT2])


def test_group_advantages_three_values() -> None:
    # [0, 1, 5]: mean 2, deviations [-2, -1, 3], sample var (4+1+9)/2 = 7, std 2.645751
    adv = group_advantages(torch.tensor([0.0, 1.0, 5.0]), [0, 0, 0])
    assert adv.tolist() == approx([-0.7559289, -0.3779645, 1.1338934])


def test_group_advantages_equal_rewards_give_zero() -> None:
    adv = group_advantages(torch.tensor([0.3, 0.3, 0.3]), [1, 1, 1])
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_group_advantages_single_row_group_gives_zero() -> None:
    adv = group_advantages(torch.tensor([5.0, 1.0, 0.0]), ["solo", "g", "g"])
    assert adv.tolist() == approx([0.0, INV_SQRT2, -INV_SQRT2])
    assert group_advantages(torch.tensor([5.0]), [0], scale=False).tolist() == [0.0]


def test_group_advantages_unscaled_only_centres() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 4.0, 2.0]), [0, 0, 0, 0, 1, 1], scale=False)
    assert adv.tolist() == approx([0.5, -0.5, -0.5, 0.5, 1.0, -1.0])


def test_group_advantages_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="one group id per row"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0]), [0, 0])
    with pytest.raises(ValueError, match="one group id per row"):
        group_advantages(torch.zeros(2, 2), [0, 0])


# --------------------------------------------------------------------------- broadcast_to_tokens


def test_broadcast_to_tokens_puts_advantage_on_masked_tokens() -> None:
    out = broadcast_to_tokens(torch.tensor([0.5, -1.0]), torch.tensor([[1, 1, 0], [0, 1, 1]]))
    assert out.dtype == torch.float32
    assert out.tolist() == [[0.5, 0.5, 0.0], [0.0, -1.0, -1.0]]


def test_broadcast_to_tokens_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"need \(B,\) and \(B, T\)"):
        broadcast_to_tokens(torch.tensor([0.5, -1.0, 2.0]), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"need \(B,\) and \(B, T\)"):
        broadcast_to_tokens(torch.tensor([0.5, -1.0]), torch.ones(2))


# --------------------------------------------------------------------------- normalize_by_task

# Two tasks over (4, 3): the 99s sit under mask 0 and must not count.
#   task a: masked values [1, 1, -1]    -> mean 1/3, population std sqrt(8/9) = 0.942809
#           (1 - 1/3) / 0.942809 = 0.707107, (-1 - 1/3) / 0.942809 = -1.414214
#   task b: masked values [2, 2, 2, 4]  -> mean 2.5 (token-weighted; per row it would be 3),
#           population std sqrt(3/4) = 0.866025: (2 - 2.5) / 0.866 = -0.577350, (4 - 2.5) / 0.866 = 1.732051
ADV = torch.tensor([[1.0, 1.0, 99.0], [-1.0, 99.0, 99.0], [2.0, 2.0, 2.0], [4.0, 99.0, 99.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]])
TASKS = ["a", "a", "b", "b"]


def test_normalize_by_task_hand_computed() -> None:
    out = normalize_by_task(ADV, MASK, TASKS)
    assert out.dtype == torch.float32
    expected = [
        [0.707107, 0.707107, 0.0],
        [-1.414214, 0.0, 0.0],
        [-0.577350, -0.577350, -0.577350],
        [1.732051, 0.0, 0.0],
    ]
    for row, exp in zip(out.tolist(), expected, strict=True):
        assert row == approx(exp)


def test_normalize_by_task_gives_mean_zero_std_one_per_task() -> None:
    out = normalize_by_task(ADV, MASK, TASKS).double()
    for task in ("a", "b"):
        rows = [i for i, t in enumerate(TASKS) if t == task]
        values = out[rows][MASK[rows].bool()]
        assert float(values.mean()) == pytest.approx(0.0, abs=1e-6)
        assert float(values.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert (out[~MASK.bool()] == 0).all()


def test_normalize_by_task_weighs_by_tokens_not_rows() -> None:
    # one row of 3 tokens at 1 and one row of 1 token at 0: token mean 0.75 (row mean would be 0.5),
    # population std sqrt(3)/4 = 0.433013 -> (1 - .75) / .433 = 0.577350, (0 - .75) / .433 = -1.732051
    adv = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = normalize_by_task(adv, mask, ["t", "t"])
    assert out.tolist()[0] == approx([0.577350] * 3)
    assert out.tolist()[1] == approx([-1.732051, 0.0, 0.0])


def test_normalize_by_task_constant_task_gives_zeros() -> None:
    adv = torch.tensor([[0.5, 0.5], [0.5, 0.0], [1.0, -1.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    out = normalize_by_task(adv, mask, ["same", "same", "other"])
    assert out[:2].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert out[2].tolist() == approx([1.0, -1.0])  # mean 0, population std 1


def test_normalize_by_task_task_without_masked_tokens_stays_zero() -> None:
    adv = torch.tensor([[3.0, 3.0], [1.0, -1.0]])
    mask = torch.tensor([[0, 0], [1, 1]])
    out = normalize_by_task(adv, mask, ["empty", "x"])
    assert out[0].tolist() == [0.0, 0.0]
    assert out[1].tolist() == approx([1.0, -1.0])


def test_normalize_by_task_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"must both be \(B, T\)"):
        normalize_by_task(torch.zeros(2, 3), torch.zeros(2, 4), ["a", "b"])
    with pytest.raises(ValueError, match=r"must both be \(B, T\)"):
        normalize_by_task(torch.zeros(3), torch.zeros(3), ["a", "b", "c"])
    with pytest.raises(ValueError, match="one task id per row"):
        normalize_by_task(torch.zeros(2, 3), torch.zeros(2, 3), ["a"])
