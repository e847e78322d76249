"""The eval summary's categories (per-sample metrics ``category``, ``category_group``,
``category_weight``): per-category rates, unweighted group means, the weighted score, hand-computed."""

from __future__ import annotations

from agentrl_envs.eval import EpisodeResult, format_table
from agentrl_envs.eval.report import category_summary, summarize_episodes


def _ep(index: int, category: str | None, solved: bool, group: str | None = None, weight: float | None = None) -> EpisodeResult:
    metrics: dict = {} if category is None else {"category": category}
    if group is not None:
        metrics.update(category_group=group, category_weight=weight)
    return EpisodeResult("bfcl", index, "completed", 1.0 if solved else 0.0, 1, metrics=metrics)


def _episodes() -> list[EpisodeResult]:
    # multi_turn_base 1/2, multi_turn_miss_func 0/1 (group multi_turn, weight 30): group = (0.5 + 0) / 2
    # simple_python 3/4 (group non_live_ast, weight 10): 0.75
    eps = [_ep(0, "multi_turn_base", True, "multi_turn", 30), _ep(1, "multi_turn_base", False, "multi_turn", 30)]
    eps.append(_ep(2, "multi_turn_miss_func", False, "multi_turn", 30))
    eps += [_ep(3 + i, "simple_python", i < 3, "non_live_ast", 10) for i in range(4)]
    broken = _ep(7, "simple_python", False, "non_live_ast", 10)
    broken.infra_error = "worker died"  # not scored: left out of every rate
    return [*eps, broken]


def test_categories_groups_and_the_weighted_score():
    s = category_summary(_episodes())
    assert s is not None
    assert s["categories"]["multi_turn_base"] == {"n": 2, "success_rate": 0.5, "group": "multi_turn", "weight": 30.0}
    assert s["categories"]["simple_python"]["n"] == 4 and s["categories"]["simple_python"]["success_rate"] == 0.75
    assert s["groups"]["multi_turn"] == {
        "categories": ["multi_turn_base", "multi_turn_miss_func"],
        "success_rate": 0.25,
        "weight": 30.0,
    }
    # (30 * 0.25 + 10 * 0.75) / 40, where the pooled rate would be 4/7
    assert s["category_score"] == (30 * 0.25 + 10 * 0.75) / 40


def test_defaults_and_tasks_without_categories():
    assert category_summary([_ep(0, None, True)]) is None
    s = category_summary([_ep(0, "a", True), _ep(1, "b", False), _ep(2, "b", True)])
    assert s is not None and set(s["groups"]) == {"a", "b"} and s["groups"]["a"]["weight"] == 1.0
    assert s["category_score"] == (1.0 + 0.5) / 2


def test_summary_and_table_show_the_categories():
    summary = summarize_episodes(_episodes(), models=["m"], tasks=["bfcl"])
    task = summary["tasks"]["bfcl"]
    assert task["success_rate"] == 4 / 7 and task["category_score"] == 0.375
    table = format_table(summary)
    for line in ("  multi_turn_base", "  = multi_turn (30)", "  = non_live_ast (10)", "  = weighted"):
        assert line in table, table
    weighted = next(row for row in table.splitlines() if "= weighted" in row)
    assert "37.5%" in weighted
