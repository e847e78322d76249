"""Text tables of ``summary.json`` contents: one model's per-task table, and models (or runs) side by side.

Pure functions over summary dictionaries (see :mod:`agentrl_envs.eval.report` for their shape),
shared by the printed output, ``report.html`` and ``agentrl-envs eval-report``.
"""

from __future__ import annotations

from typing import Any


def model_summaries(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{label: {"tasks", "overall"}}`` of any ``summary.json``, older single-model ones included."""
    if "by_model" in summary:
        return summary["by_model"]
    return {str(summary.get("model")): {"tasks": summary["tasks"], "overall": summary["overall"]}}


# --------------------------------------------------------------------------- text tables


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def tokens(value: int | None) -> str:
    """12 → ``12``, 12345 → ``12.3k``, 4560000 → ``4.56M``."""
    if value is None:
        return "-"
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.2f}M"


def _aligned(rows: list[list[str]], rules: set[int], groups: list[tuple[str, int]] | None = None) -> list[str]:
    """Rows as aligned text: the first column left-aligned, the others right-aligned, a rule
    line before each row number in ``rules``. ``groups``: (label, columns) over the columns after
    the first, printed as a line above the header."""
    count = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(count)]
    if groups:
        col = 1
        for label, span in groups:  # a group's label may widen its last column
            width = sum(widths[col : col + span]) + 2 * (span - 1)
            widths[col + span - 1] += max(0, len(label) - width)
            col += span

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out: list[str] = []
    if groups:
        head, col = [" " * widths[0]], 1
        for label, span in groups:
            head.append(label.center(sum(widths[col : col + span]) + 2 * (span - 1)))
            col += span
        out.append("  ".join(head).rstrip())
    rule = "  ".join("-" * w for w in widths)
    for number, row in enumerate(rows):
        if number in rules:
            out.append(rule)
        out.append(line(row))
    return out


def _rate_header(k: int) -> list[str]:
    return ["success"] if k == 1 else [f"avg@{k}", f"pass@{k}"]


def _rate_cells(s: dict[str, Any], k: int) -> list[str]:
    cells = [_pct(s.get("success_rate"))]
    return cells if k == 1 else [*cells, _pct(s.get("pass_at_k"))]


def format_table(summary: dict[str, Any], model: str | None = None) -> str:
    """One model's per-task table as aligned plain text: task, n, success (avg@K and pass@K with
    K runs), avg reward, avg turns, infra failures, prompt and completion tokens."""
    models = model_summaries(summary)
    label = model or next(iter(models))
    entry, k = models[label], int(summary.get("runs", 1))
    header = ["task", "n", *_rate_header(k), "avg reward", "avg turns", "infra failures", "prompt tok", "compl tok"]
    rows = [header]
    for task, s in entry["tasks"].items():
        rows.append(
            [
                task,
                str(s["n"]),
                *_rate_cells(s, k),
                _fmt(s["avg_reward"], ".3f"),
                _fmt(s["avg_turns"], ".1f"),
                str(s["infra_failures"]),
                tokens(s.get("prompt_tokens")),
                tokens(s.get("completion_tokens")),
            ]
        )
        rows += [[label, n, rate, *[""] * (len(header) - 3)] for label, n, rate in category_rows(s)]
    o = entry["overall"]
    rows.append(
        [
            "overall",
            str(o["n"]),
            *_rate_cells(o, k),
            "",
            "",
            str(o["infra_failures"]),
            tokens(o.get("prompt_tokens")),
            tokens(o.get("completion_tokens")),
        ]
    )
    title = f"model: {label}" + (f"   runs per sample: {k}" if k > 1 else "")
    return "\n".join([title, *_aligned(rows, {1, len(rows) - 1})])


def category_rows(task: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, n, success) rows under a task that reports categories (success: avg@K with K
    runs): one per category, then, when several categories were run, one per group
    (``= group (weight)``) and the task's weighted score (``= weighted``); none otherwise."""
    categories, groups = task.get("categories") or {}, task.get("groups") or {}
    rows = [(f"  {name}", str(c["n"]), _pct(c["success_rate"])) for name, c in categories.items()]
    if len(categories) > 1:
        rows += [
            (f"  = {name} ({g['weight']:g})", str(sum(categories[c]["n"] for c in g["categories"])), _pct(g["success_rate"]))
            for name, g in groups.items()
        ]
        rows.append(("  = weighted", "", _pct(task.get("category_score"))))
    return rows


#: One column group of a side-by-side table: (label, runs per sample, {"tasks", "overall"}).
Column = tuple[str, int, dict[str, Any]]


def comparison_columns(summary: dict[str, Any], prefix: str = "") -> list[Column]:
    """The column groups of one ``summary.json``: one per model."""
    k = int(summary.get("runs", 1))
    return [(prefix + label, k, entry) for label, entry in model_summaries(summary).items()]


def comparison_rows(columns: list[Column]) -> tuple[list[str], list[list[list[str]]]]:
    """The tasks (union, first-seen order, then "overall") and, per task, each column's cells:
    success (avg@K, pass@K), avg reward, tokens (prompt/completion)."""
    tasks: list[str] = []
    for _, _, entry in columns:
        tasks += [t for t in entry["tasks"] if t not in tasks]
    rows = []
    for task in [*tasks, "overall"]:
        cells = []
        for _, k, entry in columns:
            s = entry["overall"] if task == "overall" else entry["tasks"].get(task)
            if s is None:
                cells.append(["-"] * (len(_rate_header(k)) + 3))
                continue
            used = f"{tokens(s.get('prompt_tokens'))}/{tokens(s.get('completion_tokens'))}"
            cells.append([str(s.get("n", "-")), *_rate_cells(s, k), _fmt(s.get("avg_reward"), ".3f"), used])
        rows.append(cells)
    return [*tasks, "overall"], rows


def comparison_header(k: int) -> list[str]:
    return ["n", *_rate_header(k), "reward", "tokens p/c"]


def format_comparison(columns: list[Column]) -> str:
    """Tasks as rows, one column group per model (or run): n, success or avg@K and pass@K,
    average reward, prompt/completion tokens."""
    tasks, cells = comparison_rows(columns)
    header = ["task"] + [h for _, k, _ in columns for h in comparison_header(k)]
    rows = [header] + [[task] + [c for group in row for c in group] for task, row in zip(tasks, cells, strict=True)]
    groups = [(label, len(comparison_header(k))) for label, k, _ in columns]
    return "\n".join(_aligned(rows, {1, len(rows) - 1}, groups))
