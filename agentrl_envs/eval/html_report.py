"""``report.html``: one self-contained page (no external JS, CSS or fonts) for an evaluation run.

It holds the per-task table of each model (avg@K and pass@K with ``--runs K``, tokens), with
several models a side-by-side table (tasks as rows, a column group per model), an inline-SVG
bar chart (success rate and average reward per task; with several models, each model's success
rate per task), and every trajectory as a collapsible ``<details>`` with role-coloured messages
and tool calls shown as name + pretty-printed arguments. Everything that comes from a model or a
task is HTML-escaped. :func:`render_comparison_html` is the page of ``agentrl-envs eval-report``.

A task installed here may draw its own messages: a classmethod ``render_message_html(message)``
on the task class returning an HTML fragment (the task escapes what it shows) or ``None``. The
fragment is shown above the message's text, which stays one click away; a task that is not
installed, returns ``None`` or raises is shown as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from typing import Any

from .results import EpisodeResult
from .tables import Column, comparison_columns, comparison_header, comparison_rows, model_summaries, tokens

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}details{margin:4px 0;border:1px solid #ddd;border-radius:4px;padding:4px 8px}
summary{cursor:pointer}.ok{color:#1a7f37}.fail{color:#b42318}.infra{color:#9a6700}
.msg{margin:6px 0;padding:6px 8px;border-left:4px solid #999;border-radius:3px}
.system{background:#f3f3f3;border-color:#888}.user{background:#eef5ff;border-color:#3b82f6}
.assistant{background:#effaf0;border-color:#16a34a}.tool{background:#fff7e6;border-color:#d97706}
.role{font-weight:bold;font-size:.85em;text-transform:uppercase}pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.call{background:#fff;border:1px dashed #16a34a;padding:4px;margin:4px 0}
"""

_BAR_COLORS = {"success rate": "#2563eb", "avg reward": "#f59e0b"}
_MODEL_COLORS = ("#2563eb", "#f59e0b", "#16a34a", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def chart_svg(summary: dict[str, Any]) -> str:
    """A grouped bar chart (0..1) per task, as inline SVG: success rate and average reward of one
    model, or the success rate (avg@K) of each model when there are several."""
    models = model_summaries(summary)
    if len(models) == 1:
        (entry,) = models.values()
        series = [
            (label, _BAR_COLORS[label], key, entry)
            for label, key in (("success rate", "success_rate"), ("avg reward", "avg_reward"))
        ]
    else:
        series = [
            (label, _MODEL_COLORS[i % len(_MODEL_COLORS)], "success_rate", entry)
            for i, (label, entry) in enumerate(models.items())
        ]
    tasks = list(next(iter(models.values()))["tasks"])
    for _, _, _, entry in series:
        tasks += [t for t in entry["tasks"] if t not in tasks]
    bar, left, top, height = 36, 40, 20, 200
    group = max(110, len(series) * (bar + 4) + 30)
    width = max(left + group * max(len(tasks), 1) + 20, left + 140 * len(series))
    legend_rows = 1 + (len(series) - 1) // 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 40 + 20 * legend_rows}" role="img">'
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + height * (1 - tick)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4}" font-size="10" text-anchor="end">{tick:g}</text>')
    for i, task in enumerate(tasks):
        x0 = left + i * group + 15
        for j, (label, color, key, entry) in enumerate(series):
            value = (entry["tasks"].get(task) or {}).get(key)
            h = height * max(0.0, min(1.0, value or 0.0))
            x = x0 + j * (bar + 4)
            parts.append(
                f'<rect x="{x}" y="{top + height - h:.1f}" width="{bar}" height="{h:.1f}" fill="{color}">'
                f"<title>{escape(task)} {escape(label)}: {_num(value, '.3f')}</title></rect>"
            )
            parts.append(
                f'<text x="{x + bar / 2}" y="{top + height - h - 3:.1f}" font-size="10" text-anchor="middle">{_num(value, ".2f")}</text>'
            )
        middle = x0 + (len(series) * (bar + 4) - 4) / 2
        parts.append(f'<text x="{middle}" y="{top + height + 16}" font-size="12" text-anchor="middle">{escape(task)}</text>')
    for j, (label, color, _, _) in enumerate(series):
        x, y = left + (j % 4) * 140, top + height + 40 + 20 * (j // 4)
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="{y}" font-size="12">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(entry: dict[str, Any], k: int = 1) -> str:
    """One model's per-task table."""
    rates = ["success"] if k == 1 else [f"avg@{k}", f"pass@{k}"]

    def rate_cells(s: dict[str, Any], tag: str) -> str:
        cells = [_pct(s.get("success_rate"))] + ([] if k == 1 else [_pct(s.get("pass_at_k"))])
        return "".join(f"<{tag}>{c}</{tag}>" for c in cells)

    def used(s: dict[str, Any], tag: str) -> str:
        return f"<{tag}>{tokens(s.get('prompt_tokens'))}</{tag}><{tag}>{tokens(s.get('completion_tokens'))}</{tag}>"

    rows = "".join(
        f"<tr><td>{escape(task)}</td><td>{s['n']}</td>{rate_cells(s, 'td')}<td>{_num(s['avg_reward'], '.3f')}</td>"
        f"<td>{_num(s['avg_turns'], '.1f')}</td><td>{s['infra_failures']}</td>{used(s, 'td')}"
        f"<td>{escape(_counts(s['status_counts']))}</td></tr>"
        for task, s in entry["tasks"].items()
    )
    o = entry["overall"]
    rows += (
        f"<tr><th>overall</th><th>{o['n']}</th>{rate_cells(o, 'th')}<th>{_num(o.get('avg_reward'), '.3f')}</th><th></th>"
        f"<th>{o['infra_failures']}</th>{used(o, 'th')}<th></th></tr>"
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in [
            "task",
            "n",
            *rates,
            "avg reward",
            "avg turns",
            "infra failures",
            "prompt tokens",
            "completion tokens",
            "statuses",
        ]
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def comparison_table_html(columns: list[Column]) -> str:
    """Tasks as rows, a column group per model (or run): the side-by-side table as HTML."""
    tasks, cells = comparison_rows(columns)
    groups = "".join(f'<th colspan="{len(comparison_header(k))}">{escape(label)}</th>' for label, k, _ in columns)
    names = "".join(f"<th>{escape(h)}</th>" for _, k, _ in columns for h in comparison_header(k))
    body = ""
    for task, row in zip(tasks, cells, strict=True):
        tag = "th" if task == "overall" else "td"
        body += f"<tr><{tag}>{escape(task)}</{tag}>" + "".join(f"<{tag}>{escape(c)}</{tag}>" for group in row for c in group)
        body += "</tr>"
    return f'<table class="compare"><tr><th rowspan="2">task</th>{groups}</tr><tr>{names}</tr>{body}</table>'


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))


def _pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return arguments  # invalid JSON from the model is shown exactly as written


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, ensure_ascii=False)


Renderer = Callable[[dict[str, Any]], str | None]


def task_renderer(task: str) -> Renderer | None:
    """The task's ``render_message_html``, if the task is installed here and has one."""
    from ..registry import get_task

    try:
        return getattr(get_task(task), "render_message_html", None)
    except Exception:  # not installed here (the eval ran against remote workers) or broken
        return None


def _drawn(message: dict[str, Any], render: Renderer | None) -> str | None:
    if render is None:
        return None
    try:
        return render(message)
    except Exception:  # a task's drawing must never cost the report
        return None


def _message(message: dict[str, Any], render: Renderer | None = None) -> str:
    role = str(message.get("role", "unknown"))
    label = role + (f" ({message['tool_call_id']})" if message.get("tool_call_id") else "")
    body = f'<div class="role">{escape(label)}</div>'
    text = _content(message.get("content"))
    drawn = _drawn(message, render)
    if drawn:
        body += drawn + (f"<details><summary>as text</summary><pre>{escape(text)}</pre></details>" if text else "")
    elif text:
        body += f"<pre>{escape(text)}</pre>"
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        body += (
            f'<div class="call">&#128295; <b>{escape(str(fn.get("name", "?")))}</b> '
            f"<small>({escape(str(call.get('id', '')))})</small><pre>{escape(_pretty_arguments(fn.get('arguments', '')))}</pre></div>"
        )
    return f'<div class="msg {escape(role)}">{body}</div>'


def episode_id(ep: EpisodeResult, runs: int = 1, models: int = 1) -> str:
    """The anchor of an episode in the page: ``task-index``, with ``-runN`` and a model prefix when needed."""
    anchor = f"{ep.task}-{ep.index}" + (f"-run{ep.run + 1}" if runs > 1 else "")
    return f"{ep.model}-{anchor}" if models > 1 else anchor


def _episode(ep: EpisodeResult, render: Renderer | None = None, runs: int = 1, models: int = 1) -> str:
    if ep.infra_error:
        cls, verdict = "infra", "infrastructure failure (not scored)"
    else:
        cls, verdict = ("ok", "solved") if ep.success else ("fail", "failed")
    run = f" run {ep.run + 1}/{runs}" if runs > 1 else ""
    used = ""
    if ep.prompt_tokens or ep.completion_tokens:
        used = f", {tokens(ep.prompt_tokens)} + {tokens(ep.completion_tokens)} tokens"
    head = (
        f'<summary><span class="{cls}">{escape(verdict)}</span> &mdash; {escape(ep.task)} #{escape(str(ep.index))}{run} '
        f"&mdash; status {escape(ep.status)}, reward {ep.reward:.3f}, {ep.turns} turns, {ep.attempts} attempt(s)"
        f"{used}</summary>"
    )
    parts = [head]
    if ep.infra_error:
        parts.append(f'<p class="infra">{escape(ep.infra_error)}</p>')
    if ep.tools:
        names = ", ".join(str(t.get("function", {}).get("name", "?")) for t in ep.tools)
        tools = escape(json.dumps(ep.tools, indent=2, ensure_ascii=False))
        parts.append(f"<details><summary>tools: {escape(names)}</summary><pre>{tools}</pre></details>")
    parts.extend(_message(m, render) for m in ep.messages)
    anchor = escape(episode_id(ep, runs, models))
    return f'<details class="episode" id="{anchor}">{"".join(parts)}</details>'


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_CSS}</style></head><body>{body}</body></html>\n"
    )


def render_html(summary: dict[str, Any], episodes: list[EpisodeResult]) -> str:
    """The whole report page as one string (``summary``: the content of ``summary.json``)."""
    models = model_summaries(summary)
    k = int(summary.get("runs", 1))
    names = escape(", ".join(models))
    body = f"<h1>Evaluation of {names}</h1>" + (f"<p>{k} runs per sample.</p>" if k > 1 else "")
    if len(models) > 1:
        body += "<h2>Side by side</h2>" + comparison_table_html(comparison_columns(summary))
    for label, entry in models.items():
        body += (f"<h2>{escape(label)}</h2>" if len(models) > 1 else "") + _table(entry, k)
    body += f"<h2>Per task</h2>{chart_svg(summary)}<h2>Trajectories</h2>"
    renderers: dict[str, Renderer | None] = {}
    for label, entry in models.items():
        if len(models) > 1:
            body += f"<h3>{escape(label)}</h3>"
        for task in entry["tasks"]:
            eps = [ep for ep in episodes if ep.task == task and (len(models) == 1 or ep.model == label)]
            if task not in renderers:
                renderers[task] = task_renderer(task)
            body += f"<h3>{escape(task)} ({len(eps)} episodes)</h3>"
            body += "".join(_episode(ep, renderers[task], k, len(models)) for ep in eps)
    return _page(f"agentrl-envs eval: {names}", body)


def render_comparison_html(columns: list[Column], sources: list[tuple[str, str]]) -> str:
    """The page of ``agentrl-envs eval-report``: the side-by-side table of several runs, and
    where each column came from (``sources``: label, directory)."""
    listed = "".join(f"<li><b>{escape(label)}</b>: {escape(path)}</li>" for label, path in sources)
    body = f"<h1>Comparison of {len(columns)} evaluations</h1>{comparison_table_html(columns)}<ul>{listed}</ul>"
    return _page("agentrl-envs eval-report", body)
