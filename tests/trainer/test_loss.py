"""PPO clip + dual clip + k3 KL, token-mean: hand-computed per-token cases."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl_trainer.loss import policy_loss

LN2 = math.log(2.0)


def one(ratio: float, adv: float, **kwargs: object):
    """The loss of a single token with π/π_old = ratio and advantage adv."""
    lp = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    return policy_loss(lp, torch.zeros_like(lp), torch.tensor([[adv]], dtype=torch.float64), torch.ones(1, 1), **kwargs)


def test_ratio_inside_clip_range_is_unclipped() -> None:
    t = one(1.1, 1.0)  # -A·r = -1.1
    assert float(t.loss) == pytest.approx(-1.1)
    assert float(t.pg_loss) == pytest.approx(-1.1)
    assert float(t.clip_fraction) == 0.0
    assert float(t.ratio_mean) == pytest.approx(1.1)


def test_positive_advantage_above_one_plus_eps_is_clipped() -> None:
    t = one(1.5, 2.0)  # max(-3.0, -2·1.2 = -2.4)
    assert float(t.loss) == pytest.approx(-2.4)
    assert float(t.clip_fraction) == 1.0
    assert float(t.dual_clip_fraction) == 0.0


def test_positive_advantage_below_one_minus_eps_is_not_clipped() -> None:
    t = one(0.5, 1.0)  # max(-0.5, -0.8) = -0.5
    assert float(t.loss) == pytest.approx(-0.5)
    assert float(t.clip_fraction) == 0.0


def test_negative_advantage_below_one_minus_eps_is_clipped() -> None:
    t = one(0.5, -1.0)  # max(0.5, 0.8) = 0.8, under the dual cap 3
    assert float(t.loss) == pytest.approx(0.8)
    assert float(t.clip_fraction) == 1.0
    assert float(t.dual_clip_fraction) == 0.0


def test_dual_clip_caps_negative_advantage_at_minus_a_times_c() -> None:
    t = one(5.0, -1.0)  # max(5, 1.2) = 5, capped at -A·c = 3
    assert float(t.loss) == pytest.approx(3.0)
    assert float(t.dual_clip_fraction) == 1.0
    assert float(one(5.0, -2.0, dual_clip=4.0).loss) == pytest.approx(8.0)  # 10 capped at 2·4
    assert float(one(5.0, -1.0, dual_clip=None).loss) == pytest.approx(5.0)  # off: plain PPO


def test_dual_clip_does_not_touch_positive_advantages() -> None:
    assert float(one(5.0, 1.0).loss) == pytest.approx(-1.2)  # max(-5, -1.2)


def test_clip_eps_high_is_asymmetric() -> None:
    assert float(one(1.25, 1.0).loss) == pytest.approx(-1.2)
    assert float(one(1.25, 1.0, clip_eps_high=0.28).loss) == pytest.approx(-1.25)
    assert float(one(0.7, -1.0, clip_eps_high=0.28).loss) == pytest.approx(0.8)  # the low side keeps 0.2


def test_dual_clip_must_exceed_one() -> None:
    for c in (1.0, 0.5):
        with pytest.raises(ValueError, match="dual_clip must be > 1"):
            one(1.0, 1.0, dual_clip=c)


# A (1, 5) row: four trained tokens and a masked one with absurd values that must not count.
#   per token: r=1.1,A=1 -> -1.1 | r=1.5,A=2 -> -2.4 (clip) | r=0.5,A=-1 -> 0.8 (clip) | r=5,A=-1 -> 3 (dual)
#   sum 0.3 over 4 tokens -> 0.075
def batch(requires_grad: bool = False):
    lp = torch.tensor([[math.log(1.1), math.log(1.5), math.log(0.5), math.log(5.0), 100.0]], dtype=torch.float64)
    lp.requires_grad_(requires_grad)
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0, -100.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 2.0, -1.0, -1.0, 1000.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    return lp, old, adv, mask


def test_token_mean_over_masked_tokens_only() -> None:
    t = policy_loss(*batch())
    assert math.isfinite(float(t.loss))
    assert float(t.loss) == pytest.approx(0.075)
    assert float(t.pg_loss) == pytest.approx(0.075)
    assert float(t.clip_fraction) == pytest.approx(0.5)  # tokens 2 and 3
    assert float(t.dual_clip_fraction) == pytest.approx(0.25)  # token 4
    assert float(t.ratio_mean) == pytest.approx((1.1 + 1.5 + 0.5 + 5.0) / 4)
    assert float(t.kl) == 0.0  # no reference


def test_normalizer_replaces_the_token_count() -> None:
    t = policy_loss(*batch(), normalizer=8.0)
    assert float(t.loss) == pytest.approx(0.3 / 8)
    assert float(t.pg_loss) == pytest.approx(0.075)  # the logged term stays a per-token mean


def test_all_masked_gives_zero_loss() -> None:
    lp, old, adv, _ = batch()
    t = policy_loss(lp, old, adv, torch.zeros(1, 5))
    assert float(t.loss) == 0.0


def test_k3_kl_hand_computed() -> None:
    # ratio 1 and A = 0: only the KL term. ref - logπ = ln 2 -> 2 - ln2 - 1 = 0.306853;
    # ref - logπ = -ln 2 -> 0.5 + ln2 - 1 = 0.193147; mean 0.25.
    lp = torch.zeros(1, 3, dtype=torch.float64)
    ref = torch.tensor([[LN2, -LN2, 50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    t = policy_loss(lp, lp.clone(), torch.zeros_like(lp), mask, ref, kl_coef=0.5)
    assert float(t.kl) == pytest.approx(0.25)
    assert float(t.pg_loss) == pytest.approx(0.0)
    assert float(t.loss) == pytest.approx(0.125)
    single = policy_loss(lp[:, :1], lp[:, :1], torch.zeros(1, 1, dtype=torch.float64), mask[:, :1], ref[:, :1], kl_coef=1.0)
    assert float(single.kl) == pytest.approx(0.3068528)


def test_kl_coef_zero_reports_kl_without_adding_it() -> None:
    lp = torch.zeros(1, 1, dtype=torch.float64)
    t = policy_loss(lp, lp, torch.zeros_like(lp), torch.ones(1, 1), torch.full((1, 1), LN2, dtype=torch.float64))
    assert float(t.kl) == pytest.approx(0.3068528)
    assert float(t.loss) == 0.0


def test_gradients_flow_only_through_unclipped_tokens() -> None:
    # token 1 (r=1.1, A=1): d(-A·r)/dlogπ = -A·r = -1.1, over 4 tokens -> -0.275;
    # token 2 (PPO-clipped), 3 (clipped), 4 (dual-clipped) and the masked 5th: 0.
    lp, old, adv, mask = batch(requires_grad=True)
    policy_loss(lp, old, adv, mask).loss.backward()
    assert lp.grad is not None
    assert lp.grad[0].tolist() == pytest.approx([-0.275, 0.0, 0.0, 0.0, 0.0])


def test_gradient_of_unclipped_low_ratio_positive_advantage() -> None:
    # r=0.5, A=1 is not clipped (max picks -A·r): grad -0.5; r=1.5, A=1 is clipped: grad 0. Mean over 2.
    lp = torch.tensor([[math.log(0.5), math.log(1.5)]], dtype=torch.float64, requires_grad=True)
    policy_loss(
        lp, torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2)
    ).loss.backward()
    assert lp.grad is not None
    assert lp.grad[0].tolist() == pytest.approx([-0.25, 0.0])


def test_kl_gradient() -> None:
    # d/dlogπ [exp(ref - logπ) - (ref - logπ) - 1] = 1 - exp(ref - logπ) = 1 - 2 = -1 at ref - logπ = ln 2
    lp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    ref = torch.full((1, 1), LN2, dtype=torch.float64)
    policy_loss(
        lp, torch.zeros(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1), ref, kl_coef=0.1
    ).loss.backward()
    assert lp.grad is not None
    assert float(lp.grad) == pytest.approx(-0.1)
