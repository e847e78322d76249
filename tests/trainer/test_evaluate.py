"""agentrl_trainer.evaluate: a replay after an infrastructure failure samples afresh; episodes
still lost are counted, not scored, and their errors are tallied and logged so a run's record says
why they were lost."""

from __future__ import annotations

import logging

import agentrl_trainer.rollout as rollout_module
from agentrl_trainer.evaluate import evaluate, pass_at_k, summarize
from agentrl_trainer.rollout import Episode, EpisodeSpec, RolloutSettings


def episode(task: str, group: int, n: int, reward: float, error: str | None = None) -> Episode:
    return Episode(
        EpisodeSpec(task, group, group_id=group, episode_id=n),
        status="task error" if error else "completed",
        reward=reward,
        infra_failure=error is not None,
        trajectory=None,
        error=error,
    )


def test_lost_episodes_are_counted_with_their_errors_and_not_scored() -> None:
    episodes = [
        episode("os", 0, 0, 1.0),
        episode("os", 0, 1, 0.0, error="task error: the sandbox did not start"),
        episode("os", 1, 2, 0.0, error="task error: the sandbox did not start"),
        episode("os", 1, 3, 0.0),
        episode("db", 2, 4, 1.0),
        episode("db", 2, 5, 0.0, error=None),
        episode("db", 3, 6, 0.0, error="x" * 300),
    ]
    s = summarize(episodes)
    assert s["episodes"] == 4 and s["infra_failures"] == 3
    assert s["mean_reward"] == 0.5  # (1 + 0 + 1 + 0) / 4: the lost ones are not zeros
    assert s["infra_errors"] == {"os: task error: the sandbox did not start": 2, "db: " + "x" * 200: 1}
    assert list(s["infra_errors"].values()) == [2, 1]  # most frequent first
    assert s["per_task"]["os"]["episodes"] == 2 and s["per_task"]["db"]["episodes"] == 2
    p = pass_at_k(episodes, k=2)
    # sample 3 lost its only episode and is not a sample at all; samples 0 and 1 kept one of two
    assert p["samples"] == 3 and p["short_samples"] == 2 and p["pass_at_k"] == 2 / 3


def test_a_run_without_losses_has_no_errors() -> None:
    s = summarize([episode("kg", 0, 0, 1.0), episode("kg", 0, 1, 0.0)])
    assert s["infra_failures"] == 0 and s["infra_errors"] == {}


def test_a_replay_samples_afresh_and_a_sample_still_lost_is_logged(monkeypatch, caplog) -> None:
    """The evaluation replays a lost episode as the training pipeline does, with the next
    ``attempt`` (its own turn seeds, ``rollout.turn_seed``): replaying the same seeds would repeat
    a failure the sampled text caused in every play. Here sample 0's first play is lost and its
    second is not; sample 1 is lost in all three plays and the log says why."""
    plays: list[tuple[int, int]] = []

    async def fake_run_episode(client, spec, pick_engine, tokenizer, stop_token_ids, settings, *, attempt=1):
        plays.append((spec.episode_id, attempt))
        lost = spec.index == 1 or attempt == 1
        return episode(
            spec.task, spec.group_id, spec.episode_id, 0.0 if lost else 1.0, error="task error: boom" if lost else None
        )

    monkeypatch.setattr(rollout_module, "run_episode", fake_run_episode)
    with caplog.at_level(logging.WARNING, logger="agentrl_trainer.evaluate"):
        episodes = evaluate("http://127.0.0.1:9", None, None, [], {"os": [0, 1]}, RolloutSettings(seed=0), retries=2)
    assert sorted(plays) == [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3)]
    assert [(e.infra_failure, e.attempts) for e in episodes] == [(False, 2), (True, 3)]
    assert summarize(episodes)["infra_errors"] == {"os: task error: boom": 1}
    assert "os sample 1 lost to the infrastructure after 3 plays: task error: boom" in caplog.text


def test_without_retries_each_sample_is_played_once(monkeypatch) -> None:
    plays: list[int] = []

    async def fake_run_episode(client, spec, pick_engine, tokenizer, stop_token_ids, settings, *, attempt=1):
        plays.append(attempt)
        return episode(spec.task, spec.group_id, spec.episode_id, 0.0, error="task error: boom")

    monkeypatch.setattr(rollout_module, "run_episode", fake_run_episode)
    episodes = evaluate("http://127.0.0.1:9", None, None, [], {"os": [0]}, RolloutSettings(seed=0), repeats=2, retries=0)
    assert plays == [1, 1] and all(e.infra_failure for e in episodes)
