"""What an evaluation leaves behind: ``summary.json``, ``trajectories.jsonl``, ``report.html`` and a table.

``summary.json``::

    {"model": str,
     "tasks": {task: {"n", "success_rate", "avg_reward", "avg_turns", "status_counts",
                      "infra_failures", "n_episodes"}},
     "overall": {"success_rate", "micro_success_rate", "n", "infra_failures"}}

``n`` counts *scored* episodes; episodes that failed for infrastructure reasons after every retry
are left out of ``n``, of every rate and of ``status_counts``, and are counted in
``infra_failures`` (``n_episodes = n + infra_failures``). A rate over zero episodes is ``null``.
``overall.success_rate`` is the mean of the per-task success rates (AgentBench's "avg" column);
``micro_success_rate`` pools all scored episodes.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from .html_report import render_html
from .runner import EpisodeResult, EvalResult


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def task_summary(episodes: list[EpisodeResult]) -> dict[str, Any]:
    """The summary entry of one task (see the module docstring)."""
    scored = [ep for ep in episodes if ep.scored]
    return {
        "n": len(scored),
        "success_rate": _mean([float(ep.success) for ep in scored]),
        "avg_reward": _mean([ep.reward for ep in scored]),
        "avg_turns": _mean([float(ep.turns) for ep in scored]),
        "status_counts": dict(Counter(ep.status for ep in scored)),
        "infra_failures": len(episodes) - len(scored),
        "n_episodes": len(episodes),
    }


def summarize(result: EvalResult) -> dict[str, Any]:
    """The content of ``summary.json``."""
    tasks = {task: task_summary(eps) for task, eps in result.by_task().items()}
    rates = [t["success_rate"] for t in tasks.values() if t["success_rate"] is not None]
    scored = [ep for ep in result.episodes if ep.scored]
    return {
        "model": result.model,
        "tasks": tasks,
        "overall": {
            "success_rate": _mean(rates),
            "micro_success_rate": _mean([float(ep.success) for ep in scored]),
            "n": len(scored),
            "infra_failures": len(result.episodes) - len(scored),
        },
    }


def trajectory_record(ep: EpisodeResult) -> dict[str, Any]:
    """One line of ``trajectories.jsonl``: the episode's outcome, its tools once, every message."""
    return {
        "task": ep.task,
        "index": ep.index,
        "status": ep.status,
        "reward": ep.reward,
        "success": ep.success,
        "turns": ep.turns,
        "infra_error": ep.infra_error,
        "attempts": ep.attempts,
        "seconds": round(ep.seconds, 3),
        "metrics": ep.metrics,
        "tools": ep.tools,
        "messages": ep.messages,
    }


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def format_table(summary: dict[str, Any]) -> str:
    """The per-task table as aligned plain text (task, n, success, avg reward, avg turns, infra failures)."""
    header = ("task", "n", "success", "avg reward", "avg turns", "infra failures")
    rows = [
        (
            task,
            str(s["n"]),
            _fmt(None if s["success_rate"] is None else 100 * s["success_rate"], ".1f")
            + ("%" if s["success_rate"] is not None else ""),
            _fmt(s["avg_reward"], ".3f"),
            _fmt(s["avg_turns"], ".1f"),
            str(s["infra_failures"]),
        )
        for task, s in summary["tasks"].items()
    ]
    overall = summary["overall"]
    rate = overall["success_rate"]
    rows.append(
        ("overall", str(overall["n"]), "-" if rate is None else f"{100 * rate:.1f}%", "", "", str(overall["infra_failures"]))
    )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([f"model: {summary['model']}", line(header), rule, *map(line, rows[:-1]), rule, line(rows[-1])])


def print_table(summary: dict[str, Any], file: TextIO | None = None) -> None:
    """Print :func:`format_table` to ``file`` (default stdout)."""
    print(format_table(summary), file=file or sys.stdout)


def write_outputs(result: EvalResult, output: str | Path) -> dict[str, Path]:
    """Write the three files into ``output`` (created if missing); return their paths by name."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    paths = {"summary": out / "summary.json", "trajectories": out / "trajectories.jsonl", "report": out / "report.html"}
    paths["summary"].write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with paths["trajectories"].open("w", encoding="utf-8") as f:
        for ep in result.episodes:
            f.write(json.dumps(trajectory_record(ep), ensure_ascii=False, default=str) + "\n")
    paths["report"].write_text(render_html(summary, result.episodes), encoding="utf-8")
    return paths
