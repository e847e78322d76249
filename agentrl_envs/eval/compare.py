"""``agentrl-envs eval-report DIR [DIR ...]``: several finished (or unfinished) runs side by side.

Each DIR is the output directory of an ``agentrl-envs eval`` run. Its ``summary.json`` is read;
a run without one (interrupted, not yet resumed) is summarized from its ``config.json`` and
``trajectories.jsonl`` and marked *unfinished*. The table has the tasks as rows and one column
group per (run, model): n, success (avg@K and pass@K for runs with K > 1), average reward,
prompt/completion tokens. It is printed, and written to ``OUT/comparison.txt``,
``OUT/comparison.html`` and ``OUT/comparison.json`` (the columns' summaries).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ..errors import AgentRLEnvsError
from .html_report import render_comparison_html
from .report import summarize_episodes
from .store import CONFIG, SUMMARY, latest_episodes, read_config, read_records
from .tables import Column, comparison_columns, format_comparison

DEFAULT_OUTPUT = Path("eval_comparison")


def load_summary(directory: str | Path) -> tuple[dict[str, Any], bool]:
    """A run directory's summary and whether the run finished (see the module docstring)."""
    directory = Path(directory)
    path = directory / SUMMARY
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8")), True
        except ValueError as e:
            raise AgentRLEnvsError(f"{path} is not valid JSON: {e}") from None
    if not (directory / CONFIG).is_file():
        raise AgentRLEnvsError(f"{directory} holds neither {SUMMARY} nor {CONFIG}: not the output directory of an eval run")
    saved = read_config(directory)
    config = saved["config"]
    labels = [m["label"] for m in saved["models"]]
    runs = int(config.get("runs") or 1)
    planned = {
        (label, task, index, run)
        for label in labels
        for task, indices in saved["indices"].items()
        for index in indices
        for run in range(runs)
    }
    recorded = {k: ep for k, ep in latest_episodes(read_records(directory / "trajectories.jsonl")).items() if k in planned}
    summary = summarize_episodes(
        list(recorded.values()), models=labels, tasks=list(config["tasks"]), runs=runs, missing=len(planned) - len(recorded)
    )
    return summary, False


def _labels(directories: list[Path]) -> list[str]:
    names = [d.resolve().name or str(d) for d in directories]
    return names if len(set(names)) == len(names) else [str(d) for d in directories]


def compare(directories: list[str | Path]) -> tuple[list[Column], list[tuple[str, str]]]:
    """The column groups of the side-by-side table and, per column, (label, where it came from)."""
    if not directories:
        raise AgentRLEnvsError("eval-report needs at least one run directory")
    dirs = [Path(d) for d in directories]
    columns: list[Column] = []
    sources: list[tuple[str, str]] = []
    for directory, name in zip(dirs, _labels(dirs), strict=True):
        summary, finished = load_summary(directory)
        prefix = name if len(dirs) > 1 else ""
        for label, k, entry in comparison_columns(summary):
            label = "/".join(p for p in (prefix, label) if p) + ("" if finished else " (unfinished)")
            columns.append((label, k, entry))
            note = "" if finished else f", unfinished: {summary.get('missing_episodes', '?')} episodes missing"
            sources.append((label, f"{directory}{note}"))
    return columns, sources


def eval_report(directories: list[str | Path], output: str | Path | None = None, file: TextIO | None = None) -> dict[str, Path]:
    """Print the comparison of ``directories`` and write it into ``output``; return the files by name."""
    columns, sources = compare(directories)
    text = format_comparison(columns)
    stream = file or sys.stdout
    print(text, file=stream)
    for label, where in sources:
        print(f"  {label}: {where}", file=stream)
    out = Path(output or DEFAULT_OUTPUT)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"text": out / "comparison.txt", "html": out / "comparison.html", "json": out / "comparison.json"}
    paths["text"].write_text(text + "\n", encoding="utf-8")
    paths["html"].write_text(render_comparison_html(columns, sources), encoding="utf-8")
    data = [
        {"label": label, "runs": k, "source": where, **entry}
        for (label, k, entry), (_, where) in zip(columns, sources, strict=True)
    ]
    paths["json"].write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {paths['text']}, {paths['html']}, {paths['json']}", file=stream)
    return paths
