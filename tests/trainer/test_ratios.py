"""RatioRecord: a step's importance-ratio figures and outlier tokens, computed by hand."""

from __future__ import annotations

import pytest
import torch

from agentrl_trainer.ratios import RatioRecord


def test_a_steps_figures_and_outliers_over_two_micro_batches() -> None:
    # micro-batch 1: two rows, trained columns 2 and 3 (row 1's column 3 is not trained)
    rows = {
        "input_ids": torch.tensor([[5, 6, 7, 8], [5, 6, 9, 4]]),
        "loss_mask": torch.tensor([[0, 0, 1, 1], [0, 0, 1, 0]]),
        "old_logprobs": torch.tensor([[0.0, 0.0, -0.5, 0.0], [0.0, 0.0, -1.0, 0.0]]),  # col 3 row 0: forced (0)
        "old_free_logprobs": torch.tensor([[0.0, 0.0, -0.5, -13.0], [0.0, 0.0, -1.2, 0.0]]),
        "allowed_at": torch.tensor([[0, 3], [1, 2]]),
    }
    cols = torch.tensor([2, 3])
    logp = torch.tensor([[-0.4, 0.0], [-2.5, -7.0]], requires_grad=True)  # row 1 col 3: not trained, ignored
    free = torch.tensor([[-0.4, -0.4], [-2.6, -7.0]])
    rec = RatioRecord(top=2)
    rec.add(rows, cols, logp, free, decode=lambda ids: f"<{ids[0]}>")
    assert rec.log_ratio_abs_max == pytest.approx(1.5)  # row 1 col 2: -2.5 - (-1.0)
    assert rec.log_ratio_over_1 == 1.0
    assert rec.free_log_ratio_abs_max == pytest.approx(12.6)  # the forced token: -0.4 - (-13.0)
    assert rec.free_log_ratio_over_1 == 2.0  # 12.6 and 1.4
    # micro-batch 2: one row, nothing restricted, ratios under 1
    rows2 = {
        "input_ids": torch.tensor([[1, 2, 3]]),
        "loss_mask": torch.tensor([[0, 1, 1]]),
        "old_logprobs": torch.tensor([[0.0, -0.1, -0.2]]),
        "old_free_logprobs": torch.tensor([[0.0, -0.1, -0.2]]),
    }
    rec.add(rows2, torch.tensor([1, 2]), torch.tensor([[-0.3, -0.2]]), torch.tensor([[-0.3, -0.2]]))
    assert rec.metrics() == pytest.approx(
        {"log_ratio_abs_max": 1.5, "log_ratio_over_1": 1.0, "free_log_ratio_abs_max": 12.6, "free_log_ratio_over_1": 2.0}
    )
    out = rec.outliers(step=3)
    assert out["step"] == 3
    top = out["largest"][0]
    assert (top["token"], top["text"], top["grammar_restricted"]) == (9, "<9>", True)
    assert top["log_ratio"] == pytest.approx(-1.5) and top["old_logprob"] == pytest.approx(-1.0)
    worst = out["largest_unconstrained"][0]
    assert (worst["token"], worst["grammar_restricted"]) == (8, True)
    assert worst["log_ratio"] == pytest.approx(0.0) and worst["free_log_ratio"] == pytest.approx(12.6)
    assert len(out["largest"]) == len(out["largest_unconstrained"]) == 2
    assert len({(t["token"], t["log_ratio"]) for t in rec.tokens}) == len(rec.tokens)  # each token once


def test_a_micro_batch_without_trained_tokens_changes_nothing() -> None:
    rows = {
        "input_ids": torch.tensor([[1, 2]]),
        "loss_mask": torch.tensor([[0, 0]]),
        "old_logprobs": torch.zeros(1, 2),
        "old_free_logprobs": torch.zeros(1, 2),
    }
    rec = RatioRecord()
    rec.add(rows, torch.tensor([1]), torch.zeros(1, 1), torch.zeros(1, 1))
    assert rec.metrics() == {k: 0.0 for k in rec.metrics()} and rec.tokens == []


def test_outliers_are_trained_tokens_even_when_every_ratio_is_zero() -> None:
    """Ties at 0 (a fresh policy: every ratio exactly 1) still name trained tokens, never a prompt or
    padding position whose masked value is also 0."""
    rows = {
        "input_ids": torch.tensor([[11, 12, 13, 14, 15]]),
        "loss_mask": torch.tensor([[0, 0, 0, 0, 1]]),
        "old_logprobs": torch.tensor([[0.0, 0.0, 0.0, 0.0, -0.7]]),
        "old_free_logprobs": torch.tensor([[0.0, 0.0, 0.0, 0.0, -0.7]]),
    }
    rec = RatioRecord(top=3)
    rec.add(rows, torch.tensor([1, 2, 3, 4]), torch.full((1, 4), -0.7), torch.full((1, 4), -0.7))
    assert [t["token"] for t in rec.tokens] == [15]
    assert rec.metrics()["log_ratio_abs_max"] == 0.0 and rec.outliers(1)["largest"][0]["token"] == 15
