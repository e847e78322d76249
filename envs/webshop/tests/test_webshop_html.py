"""The HTML report draws WebShop's pages (agentrl_env_webshop.html through agentrl_envs.eval.html_report)."""

from __future__ import annotations

import re

from agentrl_env_webshop import WebShopTask
from agentrl_env_webshop.html import render_message_html
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.eval import html_report
from agentrl_envs.eval.html_report import render_html
from agentrl_envs.eval.results import EpisodeResult
from agentrl_envs.policy import call_turn


class Script:
    """Plays fixed calls: values may name the goal (``{asin}``, ``{name}``); ``{options}`` clicks each goal option."""

    def __init__(self, goal: dict, calls: list[tuple[str, str]]) -> None:
        fill = {"asin": goal["asin"].lower(), "name": goal["name"]}
        self.calls = []
        for tool, value in calls:
            values = goal["goal_options"] if value == "{options}" else [value.format(**fill)]
            self.calls += [(tool, v) for v in values]

    async def act(self, messages, tools):
        if not self.calls:
            return None
        tool, value = self.calls.pop(0)
        return call_turn(tool, {"keywords" if tool == "search_action" else "value": value})


CALLS = [
    ("search_action", "{name}"),
    ("click_action", "next >"),
    ("click_action", "< prev"),
    ("click_action", "{asin}"),
    ("click_action", "features"),
    ("click_action", "< prev"),
    ("click_action", "<b>not here</b>"),
    ("click_action", "{options}"),
    ("click_action", "buy now"),
]


async def test_report_draws_every_page_of_an_episode(runtime, monkeypatch):
    index = next(i for i, s in enumerate(runtime.samples) if s["goal_options"])
    goal = runtime.samples[index]
    script = Script(goal, CALLS)
    calls = len(script.calls)
    t = await run_episode(InProcessSessions(runtime), "webshop", index, script)
    assert t.reward == 1.0 and t.turns == calls
    pages = [render_message_html(m) for m in t.messages]
    tool_pages = [p for m, p in zip(t.messages, pages, strict=True) if m["role"] == "tool"]
    assert all(tool_pages) and len(tool_pages) == calls
    assert pages[0] is None and pages[1] is not None  # the system prompt is text; the opening page is drawn
    assert all(p is None for m, p in zip(t.messages, pages, strict=True) if m["role"] == "assistant")

    search, results, _next, _prev, item, features, _back, invalid, *chosen, done = [pages[1], *tool_pages]
    assert "search&hellip;" in search and ">Search</span>" in search
    assert f">{goal['asin']}</span>" in results and "Page 1 (Total results: 50)" in results
    assert ">Buy Now</span>" in item and ">Description</span>" in item and "Price: $" in item
    assert "Invalid action" in invalid and "&lt;b&gt;not here&lt;/b&gt;" in invalid and "<b>not here" not in invalid
    for page, option in zip(chosen, goal["goal_options"], strict=True):
        pressed = re.search(r'background:#f0c14b">([^<]*)</span>', page)
        assert pressed and pressed.group(1) == option  # the option just chosen is highlighted
    assert ">Features</div>" in features
    assert "Thank you for shopping with us!" in done and "Your score (min 0.0, max 1.0): <b>1.0</b>" in done

    episode = EpisodeResult("webshop", index, "completed", t.reward, t.turns, t.messages, WebShopTask.tool_definitions())
    summary = {
        "model": "m",
        "tasks": {
            "webshop": {
                "n": 1,
                "success_rate": 1.0,
                "avg_reward": 1.0,
                "avg_turns": 9.0,
                "infra_failures": 0,
                "status_counts": {},
            }
        },
        "overall": {"n": 1, "success_rate": 1.0, "infra_failures": 0},
    }
    html = render_html(summary, [episode])
    for tag in ("div", "span", "table", "tr", "td", "details", "pre", "b", "p"):
        assert html.count(f"<{tag}>") + html.count(f"<{tag} ") == html.count(f"</{tag}>"), tag
    assert html.count('class="webshop-page"') == calls + 1
    assert html.count("<summary>as text</summary>") == calls + 1  # the text stays one click away

    # a task the report cannot load (remote workers only) and a renderer that fails: plain text
    plain = render_html(
        {**summary, "tasks": {"gone": summary["tasks"]["webshop"]}},
        [EpisodeResult("gone", 0, "completed", 1.0, calls, t.messages)],
    )
    assert "webshop-page" not in plain and "Thank you for shopping with us!" in plain

    def broken(message):
        raise KeyError("content")

    monkeypatch.setattr(html_report, "task_renderer", lambda task: broken)
    plain = render_html(summary, [episode])
    assert "webshop-page" not in plain and "Thank you for shopping with us!" in plain


def test_messages_without_a_page_are_left_to_the_report():
    assert (
        render_message_html({"role": "assistant", "content": "Action: click[x]\n\nObservation:\nx\n\nAvailable Actions:\n{}"})
        is None
    )
    assert render_message_html({"role": "user", "content": "Please call a tool."}) is None
    assert render_message_html({"role": "tool", "content": "Error: unknown tool 'buy'"}) is None
    broken = "Action: click[x]\n\nObservation:\nInstruction: [SEP] i [SEP] Back to Search [SEP] ???\n\nAvailable Actions:\n{'has_search_bar': False, 'clickables': []}"
    assert render_message_html({"role": "tool", "content": broken}) is None
