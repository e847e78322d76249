"""WebShop's pages as HTML, for the evaluation report (``report.html``): a human watches an episode.

The report hands each message of an episode to :func:`render_message_html`; a message that holds
a WebShop page (the opening user message, every tool result) comes back as an HTML fragment drawn
after WebShop's templates: the instruction banner, the search bar, result rows (ASIN link, title,
price), the item page with its option groups, sub-page buttons and ``Buy Now``, the sub pages
and the done page with the score. Buttons are the page's clickables; the value the action just
clicked is highlighted (on an item page: the option chosen). Anything else (a message without a
page) returns ``None`` and the report shows the text as it is.

The fragment is built from the text observation (:mod:`.shop` renders a page as its visible
strings joined by ``" [SEP] "``, plus the clickables), so it needs nothing but the transcript.
Every string is HTML-escaped; styles are inline (the report is one self-contained file).
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

from .prompts import OBSERVATION_HEAD, OPENING_HEAD, split_available_actions
from .shop import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, SEP, SUB_PAGES

_BOX = "border:1px solid #bbb;border-radius:6px;padding:8px 12px;background:#fff;font-family:Arial,sans-serif;font-size:14px"
_BANNER = "background:#232f3e;color:#fff;padding:6px 10px;border-radius:4px;margin-bottom:8px"
_BUTTON = "display:inline-block;margin:2px 4px 2px 0;padding:2px 10px;border:1px solid #a88734;border-radius:3px;background:{bg}"
_LINK = "color:#0066c0;font-weight:bold;{extra}"
_ACTION = re.compile(r"^Action: (search|click)\[(.*)\]$", re.DOTALL)


def parse_message(content: str) -> tuple[str | None, str, dict[str, Any]] | None:
    """``(action, observation, available actions)`` of a WebShop message, or ``None`` if it holds no page.

    ``action`` is ``"click[value]"`` / ``"search[keywords]"`` for a tool result, ``None`` for the
    opening message."""
    found = split_available_actions(content)
    if found is None:
        return None
    head, actions = found
    if head.startswith(OPENING_HEAD):
        return None, head.removeprefix(OPENING_HEAD), actions
    action, sep, observation = head.partition(OBSERVATION_HEAD)
    if not sep or not _ACTION.match(action):
        return None
    return action.removeprefix("Action: "), observation, actions


def _button(label: str, pressed: bool = False) -> str:
    bg = "#f0c14b" if pressed else "#f7f8fa"
    return f'<span style="{_BUTTON.format(bg=bg)}">{escape(label)}</span>'


def _clicked(action: str | None) -> str | None:
    match = _ACTION.match(f"Action: {action}") if action else None
    return match.group(2).lower() if match and match.group(1) == "click" else None


def _instruction(tokens: list[str]) -> str:
    return f'<div style="{_BANNER}"><b>WebShop</b> &mdash; Instruction: {escape(tokens[1])}</div>'


def _search_page(tokens: list[str]) -> str:
    # WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search
    banner = f'<div style="{_BANNER}"><b>WebShop</b> &mdash; Instruction: {escape(tokens[2])}</div>'
    bar = '<span style="display:inline-block;width:60%;border:1px solid #888;border-radius:3px;padding:2px 6px;color:#888">search&hellip;</span> '
    return banner + bar + _button("Search")


def _results_page(tokens: list[str], clicked: str | None) -> str:
    # Instruction: [SEP] <i> [SEP] Back to Search [SEP] Page n (Total results: m) [SEP] [< Prev] [SEP] Next > [SEP] (asin, title, price)*
    i = 4
    nav = [_button(BACK_TO_SEARCH)]
    while i < len(tokens) and tokens[i] in (PREV_PAGE, NEXT_PAGE):
        nav.append(_button(tokens[i], tokens[i].lower() == clicked))
        i += 1
    rows = []
    for asin, title, price in zip(tokens[i::3], tokens[i + 1 :: 3], tokens[i + 2 :: 3], strict=False):
        rows.append(
            f'<tr><td style="padding:3px 8px"><span style="{_LINK.format(extra="")}">{escape(asin)}</span></td>'
            f'<td style="padding:3px 8px">{escape(title)}</td><td style="padding:3px 8px;color:#b12704">{escape(price)}</td></tr>'
        )
    return (
        f"{_instruction(tokens)}<div>{''.join(nav)} <b>{escape(tokens[3])}</b></div>"
        f'<table style="border-collapse:collapse;margin-top:6px">{"".join(rows)}</table>'
    )


def _item_page(tokens: list[str], clickables: list[str], clicked: str | None) -> str:
    # Instruction: [SEP] <i> [SEP] Back to Search [SEP] < Prev [SEP] (option name [SEP] values...)*
    #   [SEP] title [SEP] Price: … [SEP] Rating: … [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now
    title, price, rating = tokens[-7], tokens[-6], tokens[-5]
    groups: list[tuple[str, list[str]]] = []
    for token in tokens[4:-7]:
        if token in clickables and groups:
            groups[-1][1].append(token)
        else:
            groups.append((token, []))
    options = "".join(
        f'<div style="margin:4px 0"><b>{escape(name)}</b>: {"".join(_button(v, v == clicked) for v in values)}</div>'
        for name, values in groups
    )
    return (
        f"{_instruction(tokens)}<div>{_button(BACK_TO_SEARCH)}{_button(PREV_PAGE)}</div>"
        f'<div style="font-size:16px;font-weight:bold;margin:6px 0">{escape(title)}</div>{options}'
        f'<div style="color:#b12704">{escape(price)}</div><div>{escape(rating)}</div>'
        f"<div>{''.join(_button(s) for s in SUB_PAGES)}{_button(BUY_NOW, clicked == BUY_NOW.lower())}</div>"
    )


def _sub_page(tokens: list[str], clicked: str | None) -> str:
    heading = next((s for s in SUB_PAGES if s.lower() == clicked), "")
    paragraphs = "".join(f'<p style="margin:4px 0">{escape(t)}</p>' for t in tokens[4:]) or "<p><i>(empty)</i></p>"
    return (
        f"{_instruction(tokens)}<div>{_button(BACK_TO_SEARCH)}{_button(PREV_PAGE)}</div>"
        f"<div style='font-weight:bold;margin-top:6px'>{escape(heading)}</div>{paragraphs}"
    )


def _done_page(tokens: list[str]) -> str:
    def after(label: str, start: int) -> str:
        return tokens[tokens.index(label, start) + 1]

    purchased = tokens.index("Purchased")
    asin, options = after("asin", purchased), after("options", purchased)
    try:
        chosen = ", ".join(f"{k}: {v}" for k, v in json.loads(options).items()) or "none"
    except (ValueError, AttributeError):
        chosen = options
    return (
        f'<div style="{_BANNER}"><b>WebShop</b> &mdash; {escape(tokens[0])}</div>'
        f'<div>Purchased <span style="{_LINK.format(extra="")}">{escape(asin)}</span>, options: {escape(chosen)}</div>'
        f'<div style="font-size:16px;margin-top:6px">{escape(tokens[-2])}: <b>{escape(tokens[-1])}</b></div>'
    )


def render_page(observation: str, clickables: list[str], action: str | None = None) -> str | None:
    """One page (its ``[SEP]``-joined text and clickables) as an HTML fragment; ``None`` if it is no WebShop page."""
    notice = ""
    if observation.startswith("Invalid action: "):
        message, _, observation = observation.partition("\n\n")
        notice = f'<div style="color:#b42318;margin-bottom:6px">&#9888; {escape(message)}</div>'
    tokens = observation.split(SEP)
    clicked = _clicked(action)
    if tokens[0] == "WebShop" and len(tokens) == 4:
        body = _search_page(tokens)
    elif tokens[0].startswith("Thank you for shopping") and "Purchased" in tokens:
        body = _done_page(tokens)
    elif tokens[0] != "Instruction:" or len(tokens) < 4 or tokens[2] != BACK_TO_SEARCH:
        return None
    elif tokens[3].startswith("Page "):
        body = _results_page(tokens, clicked)
    elif tokens[3] == PREV_PAGE and tokens[-1] == BUY_NOW and len(tokens) >= 11:
        body = _item_page(tokens, clickables, clicked)
    elif tokens[3] == PREV_PAGE:
        body = _sub_page(tokens, clicked)
    else:
        return None
    return f'<div class="webshop-page" style="{_BOX}">{notice}{body}</div>'


def render_message_html(message: dict[str, Any]) -> str | None:
    """A transcript message as a WebShop page in HTML, or ``None`` when it holds no page."""
    content = message.get("content")
    if message.get("role") not in ("user", "tool") or not isinstance(content, str):
        return None
    parsed = parse_message(content)
    if parsed is None:
        return None
    action, observation, actions = parsed
    try:
        return render_page(observation, [str(c) for c in actions.get("clickables", [])], action)
    except (IndexError, ValueError):  # a page that does not parse as WebShop's: shown as text
        return None
