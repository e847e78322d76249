"""``report.html``: one self-contained page (no external JS, CSS or fonts) for an evaluation run.

It holds the per-task table, an inline-SVG bar chart of success rate and average reward per task,
and every trajectory as a collapsible ``<details>`` with role-coloured messages and tool calls
shown as name + pretty-printed arguments. Everything that comes from a model or a task is
HTML-escaped.

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

from .runner import EpisodeResult

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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def chart_svg(summary: dict[str, Any]) -> str:
    """A grouped bar chart (0..1) of success rate and average reward per task, as inline SVG."""
    tasks = list(summary["tasks"].items())
    group, bar, left, top, height = 110, 36, 40, 20, 200
    width = left + group * max(len(tasks), 1) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 60}" role="img">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + height * (1 - tick)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4}" font-size="10" text-anchor="end">{tick:g}</text>')
    for i, (task, s) in enumerate(tasks):
        x0 = left + i * group + 15
        for j, (label, key) in enumerate((("success rate", "success_rate"), ("avg reward", "avg_reward"))):
            value = s[key] or 0.0
            h = height * max(0.0, min(1.0, value))
            x = x0 + j * (bar + 4)
            parts.append(
                f'<rect x="{x}" y="{top + height - h:.1f}" width="{bar}" height="{h:.1f}" fill="{_BAR_COLORS[label]}">'
                f"<title>{escape(task)} {label}: {_num(s[key], '.3f')}</title></rect>"
            )
            parts.append(
                f'<text x="{x + bar / 2}" y="{top + height - h - 3:.1f}" font-size="10" text-anchor="middle">{_num(s[key], ".2f")}</text>'
            )
        parts.append(
            f'<text x="{x0 + bar + 2}" y="{top + height + 16}" font-size="12" text-anchor="middle">{escape(task)}</text>'
        )
    legend_y = top + height + 40
    for j, (label, color) in enumerate(_BAR_COLORS.items()):
        parts.append(f'<rect x="{left + j * 120}" y="{legend_y - 10}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{left + j * 120 + 16}" y="{legend_y}" font-size="12">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(summary: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(task)}</td><td>{s['n']}</td><td>{_pct(s['success_rate'])}</td><td>{_num(s['avg_reward'], '.3f')}</td>"
        f"<td>{_num(s['avg_turns'], '.1f')}</td><td>{s['infra_failures']}</td><td>{escape(_counts(s['status_counts']))}</td></tr>"
        for task, s in summary["tasks"].items()
    )
    o = summary["overall"]
    rows += f"<tr><th>overall</th><th>{o['n']}</th><th>{_pct(o['success_rate'])}</th><th></th><th></th><th>{o['infra_failures']}</th><th></th></tr>"
    head = "<tr><th>task</th><th>n</th><th>success</th><th>avg reward</th><th>avg turns</th><th>infra failures</th><th>statuses</th></tr>"
    return f"<table>{head}{rows}</table>"


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


def _episode(ep: EpisodeResult, render: Renderer | None = None) -> str:
    if ep.infra_error:
        cls, verdict = "infra", "infrastructure failure (not scored)"
    else:
        cls, verdict = ("ok", "solved") if ep.success else ("fail", "failed")
    head = (
        f'<summary><span class="{cls}">{escape(verdict)}</span> &mdash; {escape(ep.task)} #{escape(str(ep.index))} '
        f"&mdash; status {escape(ep.status)}, reward {ep.reward:.3f}, {ep.turns} turns, {ep.attempts} attempt(s)</summary>"
    )
    parts = [head]
    if ep.infra_error:
        parts.append(f'<p class="infra">{escape(ep.infra_error)}</p>')
    if ep.tools:
        names = ", ".join(str(t.get("function", {}).get("name", "?")) for t in ep.tools)
        tools = escape(json.dumps(ep.tools, indent=2, ensure_ascii=False))
        parts.append(f"<details><summary>tools: {escape(names)}</summary><pre>{tools}</pre></details>")
    parts.extend(_message(m, render) for m in ep.messages)
    return f'<details class="episode" id="{escape(ep.task)}-{escape(str(ep.index))}">{"".join(parts)}</details>'


def render_html(summary: dict[str, Any], episodes: list[EpisodeResult]) -> str:
    """The whole report page as one string."""
    model = escape(str(summary["model"]))
    sections = []
    for task in summary["tasks"]:
        eps = [ep for ep in episodes if ep.task == task]
        render = task_renderer(task)
        sections.append(f"<h3>{escape(task)} ({len(eps)} episodes)</h3>" + "".join(_episode(ep, render) for ep in eps))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>agentrl-envs eval: {model}</title><style>{_CSS}</style></head><body>"
        f"<h1>Evaluation of {model}</h1>{_table(summary)}<h2>Per task</h2>{chart_svg(summary)}"
        f"<h2>Trajectories</h2>{''.join(sections)}</body></html>\n"
    )
