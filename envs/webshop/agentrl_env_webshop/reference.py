"""The reference shopper: search the target's title (an easy goal's spelled-out ``keywords``),
page through the results to the target, open it, choose the goal's options, buy. It reads every
observation (a real policy)."""

from __future__ import annotations

from typing import Any

from thefuzz import fuzz

from agentrl_envs.policy import call_turn, last_tool_output

from .prompts import split_available_actions
from .reward import normalize_color
from .search import SEARCH_RETURN_N
from .shop import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, PRODUCT_WINDOW, SUB_PAGES, compact_clickables

_BUTTONS = {b.lower() for b in (BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, *SUB_PAGES)}


def available_actions(text: str, compact: bool = False) -> dict[str, Any] | None:
    """The ``Available Actions`` dict at the end of an observation (``None`` if there is none);
    ``compact``: of a page in the easy splits' compact form (its bracketed clickables)."""
    if compact:
        clickables = [] if text.startswith("Invalid action: ") else compact_clickables(text)  # no page
        return {"has_search_bar": "search" in clickables, "clickables": clickables}
    found = split_available_actions(text)
    return found[1] if found is not None else None


class WebShopReference:
    def __init__(self, goal: dict[str, Any]) -> None:
        self.goal = goal
        self.asin = goal["asin"].lower()
        #: WebShop shows at most 50 results, 10 a page (an easy goal's ``results_per_page``: fewer)
        self.max_pages = -(-SEARCH_RETURN_N // (goal.get("results_per_page") or PRODUCT_WINDOW))
        self.pages_seen = 0
        self.searched = False
        self.pending_options: list[str] | None = None

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        if messages and messages[-1].get("role") == "user":  # the opening page (after an easy episode's example)
            observation: str | None = str(messages[-1].get("content", ""))
        else:
            observation = last_tool_output(messages)
        if observation is None:
            return None
        actions = available_actions(observation, compact=self.goal.get("prompt") == "easy")
        if actions is None:
            return None
        clickables: list[str] = actions["clickables"]
        if actions["has_search_bar"]:
            if self.searched:
                return None  # back at the search page: the target was not found
            self.searched = True
            return call_turn("search_action", {"keywords": self.goal.get("keywords") or self.goal["name"]})
        if self.asin in clickables:
            return call_turn("click_action", {"value": self.asin})
        if BUY_NOW.lower() in clickables:
            return self._on_item_page([c for c in clickables if c not in _BUTTONS])
        if NEXT_PAGE.lower() in clickables and self.pages_seen < self.max_pages - 1:
            self.pages_seen += 1
            return call_turn("click_action", {"value": NEXT_PAGE.lower()})
        return None

    def _on_item_page(self, option_values: list[str]) -> dict[str, Any]:
        if self.pending_options is None:
            self.pending_options = [v for v in (best_option(g, option_values) for g in self.goal["goal_options"]) if v]
        if self.pending_options:
            return call_turn("click_action", {"value": self.pending_options.pop(0)})
        return call_turn("click_action", {"value": BUY_NOW.lower()})


def best_option(wanted: str, values: list[str]) -> str | None:
    """The option value that matches ``wanted`` best under WebShop's option matching (``None`` if none matches)."""
    if wanted in values:
        return wanted
    scored = [(fuzz.token_set_ratio(normalize_color(v), normalize_color(wanted)), -n, v) for n, v in enumerate(values)]
    best = max(scored, default=None)
    return best[2] if best is not None and best[0] > 85 else None
