"""What an evaluation leaves behind: ``summary.json``, ``trajectories.jsonl``, ``report.html`` and tables.

``summary.json``::

    {"models": [label, ...], "runs": K, "missing_episodes": 0,
     "by_model": {label: {"tasks": {task: TASK}, "overall": OVERALL}},
     # with one model, also (as before several models could be evaluated at once):
     "model": label, "tasks": {task: TASK}, "overall": OVERALL}

    TASK = {"n", "n_episodes", "n_samples", "infra_failures", "success_rate", "avg_at_k",
            "pass_at_k", "k", "run_success_rates", "avg_reward", "avg_turns", "status_counts",
            "prompt_tokens", "completion_tokens"}
    OVERALL = {"success_rate", "micro_success_rate", "pass_at_k", "avg_reward", "n",
               "infra_failures", "prompt_tokens", "completion_tokens"}

``n`` counts *scored* episodes; episodes that failed for infrastructure reasons after every retry
are left out of ``n``, of every rate and of ``status_counts``, and are counted in
``infra_failures`` (``n_episodes = n + infra_failures``). A rate over zero episodes is ``null``.

With ``K`` runs (``--runs K``) every sample is played ``K`` times. ``success_rate`` (also
``avg_at_k``) is the mean success over all scored episodes of the task: avg@K; with K = 1 it is
the plain success rate. ``pass_at_k`` is the mean over samples of the unbiased estimator
``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021, the Codex paper) with ``n`` the sample's scored
runs, ``c`` its solved ones and ``k = K``: the share of samples solved at least once in K runs.
A sample with fewer than K scored runs (infrastructure failures) counts as passed if it was solved
in any of them; one with none is left out. ``run_success_rates`` is the success rate of each run.
Tokens are the API's ``usage``, summed over the task's episodes (every attempt of them).

``overall.success_rate`` is the mean of the per-task success rates (AgentBench's "avg" column),
``pass_at_k`` and ``avg_reward`` likewise; ``micro_success_rate`` pools all scored episodes.

Categories: a task whose episodes name a ``category`` in their metrics (BFCL's) also gets
``"categories": {name: {"n", "success_rate", "group", "weight"}}``, ``"groups": {name:
{"categories", "success_rate", "weight"}}`` and ``"category_score"``. A category's group is the
metric ``category_group`` (default: the category itself), the group's weight ``category_weight``
(default 1); a group's rate is the unweighted mean of its categories' rates and
``category_score`` the weighted mean of the rates of the groups that were run: BFCL's
leaderboard weighting restricted to the categories run. Scored episodes without a category are
left out of these three.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterable
from math import comb
from pathlib import Path
from typing import Any, TextIO

from .html_report import render_html
from .results import EpisodeResult, EvalResult
from .store import REPORT, SUMMARY, TRAJECTORIES, encode, trajectory_record
from .tables import comparison_columns, format_comparison, format_table, model_summaries

__all__ = [
    "category_summary",
    "format_comparison",
    "format_table",
    "model_summaries",
    "pass_at_k",
    "print_table",
    "summarize",
    "summarize_episodes",
    "task_summary",
    "trajectory_record",
    "write_outputs",
]


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` runs drawn from ``n`` (``c`` of them solved) is solved:
    ``1 - C(n-c, k) / C(n, k)``, unbiased for ``n >= k``. With ``n < k``: 1.0 if any run was solved."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if n < k:
        return float(c > 0)
    return 1.0 - comb(n - c, k) / comb(n, k)


def task_summary(episodes: list[EpisodeResult], runs: int = 1) -> dict[str, Any]:
    """The summary entry of one task of one model (see the module docstring)."""
    scored = [ep for ep in episodes if ep.scored]
    samples: dict[Any, list[EpisodeResult]] = {}
    for ep in episodes:
        samples.setdefault(json.dumps(ep.index), [])
        if ep.scored:
            samples[json.dumps(ep.index)].append(ep)
    per_sample = [pass_at_k(len(eps), sum(ep.success for ep in eps), runs) for eps in samples.values() if eps]
    success = _mean([float(ep.success) for ep in scored])
    return {
        "n": len(scored),
        "n_episodes": len(episodes),
        "n_samples": len(samples),
        "infra_failures": len(episodes) - len(scored),
        "success_rate": success,
        "avg_at_k": success,
        "pass_at_k": _mean(per_sample),
        "k": runs,
        "run_success_rates": [_mean([float(ep.success) for ep in scored if ep.run == r]) for r in range(runs)],
        "avg_reward": _mean([ep.reward for ep in scored]),
        "avg_turns": _mean([float(ep.turns) for ep in scored]),
        "status_counts": dict(Counter(ep.status for ep in scored)),
        "prompt_tokens": sum(ep.prompt_tokens for ep in episodes),
        "completion_tokens": sum(ep.completion_tokens for ep in episodes),
    }


def category_summary(episodes: list[EpisodeResult]) -> dict[str, Any] | None:
    """``categories``, ``groups`` and ``category_score`` of one task's episodes (see the module
    docstring), or ``None`` when no scored episode names a category."""
    by_category: dict[str, list[EpisodeResult]] = {}
    for ep in episodes:
        if ep.scored and ep.metrics.get("category"):
            by_category.setdefault(str(ep.metrics["category"]), []).append(ep)
    if not by_category:
        return None
    categories: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, eps in by_category.items():
        first = eps[0].metrics
        group, weight = str(first.get("category_group") or name), float(first.get("category_weight") or 1.0)
        rate = _mean([float(ep.success) for ep in eps])
        categories[name] = {"n": len(eps), "success_rate": rate, "group": group, "weight": weight}
        groups.setdefault(group, {"categories": [], "rates": [], "weight": weight})
        groups[group]["categories"].append(name)
        groups[group]["rates"].append(rate)
    for g in groups.values():
        g["success_rate"] = _mean(g.pop("rates"))
    total = sum(g["weight"] for g in groups.values())
    score = sum(g["weight"] * g["success_rate"] for g in groups.values()) / total if total else None
    return {"categories": categories, "groups": groups, "category_score": score}


def _model_summary(episodes: list[EpisodeResult], tasks: list[str], runs: int) -> dict[str, Any]:
    grouped: dict[str, list[EpisodeResult]] = {t: [] for t in tasks}
    for ep in episodes:
        grouped.setdefault(ep.task, []).append(ep)
    per_task = {task: task_summary(eps, runs) for task, eps in grouped.items()}
    for task, eps in grouped.items():
        per_task[task].update(category_summary(eps) or {})
    scored = [ep for ep in episodes if ep.scored]
    return {
        "tasks": per_task,
        "overall": {
            "success_rate": _mean(t["success_rate"] for t in per_task.values()),
            "micro_success_rate": _mean([float(ep.success) for ep in scored]),
            "pass_at_k": _mean(t["pass_at_k"] for t in per_task.values()),
            "avg_reward": _mean(t["avg_reward"] for t in per_task.values()),
            "n": len(scored),
            "infra_failures": len(episodes) - len(scored),
            "prompt_tokens": sum(ep.prompt_tokens for ep in episodes),
            "completion_tokens": sum(ep.completion_tokens for ep in episodes),
        },
    }


def summarize_episodes(
    episodes: list[EpisodeResult], *, models: list[str], tasks: list[str], runs: int = 1, missing: int = 0
) -> dict[str, Any]:
    """The content of ``summary.json`` from episodes (each ``ep.model`` one of ``models``)."""
    by_model: dict[str, list[EpisodeResult]] = {m: [] for m in models}
    for ep in episodes:
        by_model.setdefault(ep.model or models[0], []).append(ep)
    summaries = {m: _model_summary(eps, tasks, runs) for m, eps in by_model.items()}
    out: dict[str, Any] = {"models": list(summaries), "runs": runs, "missing_episodes": missing, "by_model": summaries}
    if len(summaries) == 1:
        (label, only), *_ = summaries.items()
        out = {"model": label, **only, **out}
    return out


def summarize(result: EvalResult) -> dict[str, Any]:
    """The content of ``summary.json``."""
    return summarize_episodes(result.episodes, models=result.models, tasks=result.config.tasks, runs=result.config.runs)


def print_table(summary: dict[str, Any], file: TextIO | None = None) -> None:
    """Print every model's :func:`format_table` to ``file`` (default stdout), then, with several
    models, the side-by-side :func:`format_comparison`."""
    stream = file or sys.stdout
    models = model_summaries(summary)
    for number, label in enumerate(models):
        print(("\n" if number else "") + format_table(summary, label), file=stream)
    if len(models) > 1:
        print("\nside by side:", file=stream)
        print(format_comparison(comparison_columns(summary)), file=stream)


# --------------------------------------------------------------------------- files


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(result: EvalResult, output: str | Path) -> dict[str, Path]:
    """Write summary.json, trajectories.jsonl (one line per episode, in order: this replaces the
    journal a :class:`~agentrl_envs.eval.store.RunStore` appended to) and report.html into
    ``output`` (created if missing); return their paths by name."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    paths = {"summary": out / SUMMARY, "trajectories": out / TRAJECTORIES, "report": out / REPORT}
    _replace(paths["trajectories"], b"".join(encode(ep) for ep in result.episodes))
    _replace(paths["report"], render_html(summary, result.episodes).encode("utf-8"))
    # last: a summary.json marks a finished run
    _replace(paths["summary"], (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return paths
