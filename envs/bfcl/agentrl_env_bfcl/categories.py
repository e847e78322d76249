"""BFCL's categories: which this task runs (its splits), which it does not and why, and how the
leaderboard weighs them.

The weighting is BFCL's ``generate_leaderboard_csv`` (``bfcl_eval/eval_checker/eval_runner_helper.py``):
a group's accuracy is the unweighted mean of its categories' accuracies (non-live AST: simple,
multiple, parallel, parallel multiple, where simple is itself the mean over Python, Java and
JavaScript; multi-turn: its four categories; irrelevance: non-live and live), and the overall
accuracy weighs the groups 10 (non-live), 10 (live), 10 (irrelevance), 30 (multi-turn) and
40 (agentic). Every sample carries its category, group and the group's weight in its metrics;
the eval report (``agentrl_envs.eval.report``) groups by them and weighs the groups that were run.
"""

from __future__ import annotations

MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
SINGLE_TURN = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
#: The categories this task runs: a split each.
SUPPORTED = MULTI_TURN + SINGLE_TURN
#: Splits that hold several categories, interleaved (the first entry of each category, then the
#: second of each...), so that ``--limit N`` takes about N / k entries of each of the k.
COLLECTIONS = {
    "multi_turn": MULTI_TURN,
    "non_live_python": ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"),
    "all_supported": SUPPORTED,
}

#: BFCL's categories this task does not run, and why (the task's README lists them).
UNSUPPORTED = {
    "simple_java": "not run yet: arguments are Java values in strings, scored with BFCL's Java type conversion",
    "simple_javascript": "not run yet: as simple_java, for JavaScript",
    **{
        c: "not run yet: the same AST checker, but the leaderboard weighs the live group by entry count"
        for c in ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance")
    },
    "web_search_base": "needs the network: BFCL's WebSearchAPI queries SerpAPI and fetches web pages",
    "web_search_no_snippet": "needs the network, as web_search_base",
    "memory_kv": "memory: each entry needs BFCL's prerequisite conversations played first, kept in files between entries",
    "memory_vector": "memory: needs embeddings (sentence-transformers and faiss, with a model from a hub at run time)",
    "memory_rec_sum": "memory: as memory_kv",
    "format_sensitivity": "not a scoring category: it varies the prompt format of prompting (non function-calling) models",
}

#: (group, weight) of each supported category, BFCL's overall weighting.
GROUPS = {
    **{c: ("multi_turn", 30.0) for c in MULTI_TURN},
    **{c: ("non_live_ast", 10.0) for c in ("simple_python", "multiple", "parallel", "parallel_multiple")},
    "irrelevance": ("irrelevance", 10.0),
}


def category_of(entry_id: str) -> str:
    """``multi_turn_base_12`` → ``multi_turn_base`` (BFCL's ids end in ``_<number>``)."""
    return entry_id.rsplit("_", 1)[0]


def is_multi_turn(category: str) -> bool:
    return category in MULTI_TURN


def metrics(category: str) -> dict[str, object]:
    """The per-sample metrics the eval report groups by."""
    group, weight = GROUPS[category]
    return {"category": category, "category_group": group, "category_weight": weight}
