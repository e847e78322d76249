"""Lagging engines: which engines lag, when they take new weights, and which engine a turn gets."""

from __future__ import annotations

import random

import pytest

from agentrl_trainer.lagging import choose_engine, engines_to_sync, lagging_engine_ids


@pytest.mark.parametrize(
    ("num", "fraction", "expected"),
    [
        (4, 0.25, [3]),
        (2, 0.5, [1]),
        (8, 0.25, [6, 7]),
        (4, 0.0, []),
        (1, 0.5, []),  # rounds to 1 of 1: never all engines
        (3, 0.9, [1, 2]),  # round(2.7) = 3, capped at 2
        (5, 0.5, [3, 4]),  # round(2.5) = 2 (banker's rounding)
    ],
)
def test_lagging_engine_ids(num: int, fraction: float, expected: list[int]) -> None:
    assert lagging_engine_ids(num, fraction) == expected


@pytest.mark.parametrize(("num", "fraction"), [(0, 0.25), (4, 1.0), (4, -0.1), (4, 1.5)])
def test_lagging_engine_ids_rejects_bad_arguments(num: int, fraction: float) -> None:
    with pytest.raises(ValueError):
        lagging_engine_ids(num, fraction)


def test_engines_to_sync_lagging_every_lag_steps() -> None:
    got = {step: engines_to_sync(step, 4, [3], 3) for step in range(1, 7)}
    assert got == {
        1: [0, 1, 2],
        2: [0, 1, 2],
        3: [0, 1, 2, 3],
        4: [0, 1, 2],
        5: [0, 1, 2],
        6: [0, 1, 2, 3],
    }


def test_engines_to_sync_step_zero_reaches_all_and_no_lagging_means_all() -> None:
    assert engines_to_sync(0, 4, [2, 3], 3) == [0, 1, 2, 3]  # the initial publish
    assert engines_to_sync(5, 2, [], 3) == [0, 1]
    assert engines_to_sync(5, 4, [2, 3], 1) == [0, 1, 2, 3]  # lag_steps 1: nobody lags


def test_engines_to_sync_rejects_lag_steps_below_one() -> None:
    with pytest.raises(ValueError, match="lag_steps"):
        engines_to_sync(1, 2, [1], 0)


def test_choose_engine_p0_round_robins_over_current() -> None:
    rng = random.Random(0)
    assert [choose_engine(rng, [0, 1, 2], [3], 0.0, k) for k in range(6)] == [0, 1, 2, 0, 1, 2]


def test_choose_engine_p1_always_lagging() -> None:
    rng = random.Random(0)
    assert [choose_engine(rng, [0, 1], [2, 3], 1.0, k) for k in range(4)] == [2, 3, 2, 3]


def test_choose_engine_without_lagging_engines_uses_current() -> None:
    rng = random.Random(0)
    assert [choose_engine(rng, [0, 1], [], 1.0, k) for k in range(3)] == [0, 1, 0]


def test_choose_engine_needs_a_current_engine() -> None:
    with pytest.raises(ValueError, match="current"):
        choose_engine(random.Random(0), [], [1], 0.5)


def test_choose_engine_frequency_with_fixed_seed() -> None:
    rng = random.Random(1234)
    picks = [choose_engine(rng, [0, 1, 2], [3], 0.25, k) for k in range(4000)]
    lagging = picks.count(3)
    assert lagging == 940  # exact for this seed: Random(1234), 4000 draws below 0.25
    assert abs(lagging - 1000) < 100  # and near p × n (binomial sd ≈ 27)
    assert set(picks) == {0, 1, 2, 3}
