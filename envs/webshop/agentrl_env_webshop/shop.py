"""One shopper's session of the web shop: WebShop's pages, transitions and text observations.

Pages (WebShop's templates) and what a click does there (``SimServer.receive``)::

    search   --search[kw]-->  results (page 1)        search works from every page, as in WebShop
    results  --next > / < prev-->  results (page ±1)  10 of the (at most 50) hits per page
    results  --ASIN-->  item                          item --option value--> item (option chosen)
    item     --description / features / reviews-->  sub page --< prev--> item
    item     --< prev-->  results (options cleared)   any page --back to search--> search (reset)
    item     --buy now-->  done (the episode ends and is scored)

A page is shown as WebShop's ``text`` observation mode shows it: its visible strings joined by
``" [SEP] "``, and its clickables (buttons and product links lowercased, option values as they
are) as WebShop's ``get_available_actions`` lists them. A click on something that is not on the
page raises :class:`InvalidAction` (WebShop silently does nothing).

A session with ``compact=True`` (the easy splits) shows the same pages, clickables and
transitions in a shorter text (:attr:`Page.compact`): one line per row, every clickable in
square brackets where the page shows it (``[buy now]``), the instruction on the search page only,
a one-line done page, no separate list of clickables (:func:`compact_clickables` reads them
back) and, given the goal's ``steps``, a last line naming the step to take next from that page.
WebShop's ``[SEP]`` costs 5 tokens of SmolLM2's tokenizer and every clickable appears twice in
the text mode, so a small model's 2,048-token context would not hold a worked example and an
episode otherwise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog
from .search import SearchIndex

PRODUCT_WINDOW = 10
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
SEP = " [SEP] "
#: A compact page's next step while an option the instruction asks for is not chosen yet.
OPTION_STEP = "Next step: click the option the instruction asks for"


class InvalidAction(Exception):
    """The action cannot be done on the current page; nothing changed."""


@dataclass(frozen=True)
class Page:
    text: str
    has_search_bar: bool
    clickables: list[str]
    #: the same page in the compact form (what a compact session shows; see the module's doc)
    compact: str = ""

    def available_actions(self) -> str:
        """WebShop's ``get_available_actions()`` as AgentBench prints it (a Python dict)."""
        return repr({"has_search_bar": self.has_search_bar, "clickables": self.clickables})


@dataclass
class Purchase:
    product: dict[str, Any]
    options: dict[str, str]


@dataclass
class ShopSession:
    catalog: Catalog
    index: SearchIndex
    instruction: str
    #: results shown per page (WebShop: 10; the easy splits show fewer, to keep prompts short)
    page_size: int = PRODUCT_WINDOW
    #: the session's pages are shown as :attr:`Page.compact` (the easy splits)
    compact: bool = False
    #: the steps the instruction spells out (an easy goal's: ``("search", keywords)``,
    #: ``("click", asin)``, ``("click", option value)``..., ``("click", "buy now")``); with them,
    #: a compact page ends with the one to take next from it (``Next step: click "buy now"``)
    steps: list[tuple[str, str]] = field(default_factory=list)
    page_name: str = "search"
    keywords: list[str] = field(default_factory=list)
    page_no: int = 1
    results: list[int] = field(default_factory=list)
    product_index: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    visited: set[str] = field(default_factory=set)
    purchase: Purchase | None = None
    reward: float = 0.0  # set by the task once the purchase is scored; the done page shows it
    searches: int = 0
    clicks: int = 0

    # ------------------------------------------------------------------ actions

    def page(self) -> Page:
        return _RENDER[self.page_name](self)

    def search(self, keywords: str) -> Page:
        if self.page_name == "done":
            raise InvalidAction("The purchase is complete; nothing more can be done.")
        words = keywords.lower().split(" ")
        if not keywords.strip():
            raise InvalidAction("The search keywords are empty. Nothing happened.")
        self.searches += 1
        self.keywords = words
        self.results = self.index.search(" ".join(words))
        self._show_results(1)
        return self.page()

    def click(self, value: str) -> Page:
        current = self.page()
        value = value.lower()
        if value == "search" and self.page_name == "search":
            raise InvalidAction('"search" is the search button: use search_action with your keywords to search.')
        if value not in current.clickables:
            raise InvalidAction(f'"{value}" is not a clickable value on this page. Nothing happened.')
        self.clicks += 1
        if value == BUY_NOW.lower():
            assert self.product_index is not None
            self.purchase = Purchase(self.catalog.product(self.product_index), dict(self.options))
            self.page_name = "done"
        elif value == BACK_TO_SEARCH.lower():
            self.page_name, self.keywords, self.results, self.product_index = "search", [], [], None
            self.options, self.visited = {}, set()
        elif value == NEXT_PAGE.lower() and self.page_name == "results":
            self._show_results(self.page_no + 1)
        elif value == PREV_PAGE.lower() and self.page_name == "results":
            self._show_results(self.page_no - 1)
        elif value == PREV_PAGE.lower() and self.page_name == "sub":
            self.page_name = "item"
        elif value == PREV_PAGE.lower() and self.page_name == "item":
            self._show_results(self.page_no)
        elif value in (s.lower() for s in SUB_PAGES):
            self.page_name, self.sub_page = "sub", next(s for s in SUB_PAGES if s.lower() == value)
        elif self.page_name == "results":
            i = self.catalog.index_of(value)
            assert i is not None
            self.product_index, self.page_name = i, "item"
            self.visited.add(value.upper())
        else:  # an option value: the last option group offering it (WebShop's clickable map)
            product = self.catalog.product(self.product_index)  # type: ignore[arg-type]
            name = [n for n, values in product["options"].items() if value in values][-1]
            self.options[name] = value
        return self.page()

    def next_step(self) -> str:
        """The line a compact page ends with: the step of :attr:`steps` to take next from the
        current page (``""`` without steps and once bought)."""
        return "".join(_next_step(self))

    def _show_results(self, page_no: int) -> None:
        self.page_name, self.page_no, self.options = "results", page_no, {}

    # ------------------------------------------------------------------ pages


def _next_step(s: ShopSession) -> list[str]:
    """A compact page's last line: the step of :attr:`ShopSession.steps` to take next from the
    current page (``[]`` without steps)."""
    if not s.steps or s.page_name == "done":
        return []
    (_, asin), wanted = s.steps[1], [value for _, value in s.steps[2:-1]]
    on_target = s.product_index is not None and s.catalog.product(s.product_index)["asin"].lower() == asin
    if s.page_name == "item" and on_target:
        if any(v not in s.options.values() for v in wanted):
            return [OPTION_STEP]  # which value is the model's to read from the instruction
        step = ("click", BUY_NOW.lower())
    elif s.page_name == "sub" or s.page_name == "item":
        step = ("click", PREV_PAGE.lower())
    elif s.page_name == "results" and asin in (s.catalog.product(i)["asin"].lower() for i in _shown(s)):
        step = ("click", asin)
    else:
        step = s.steps[0]
    return [f'Next step: {step[0]} "{step[1]}"']


def _shown(s: ShopSession) -> list[int]:
    """The products the results page lists."""
    return s.results[(s.page_no - 1) * s.page_size : s.page_no * s.page_size]


def _b(value: str) -> str:
    return f"[{value.lower()}]"


def _search_page(s: ShopSession) -> Page:
    compact = "\n".join(["WebShop", f"Instruction: {s.instruction}", _b("search"), *_next_step(s)])
    return Page(SEP.join(["WebShop", "Instruction:", s.instruction, "Search"]), True, ["search"], compact)


def _header(s: ShopSession) -> list[str]:
    return ["Instruction:", s.instruction, BACK_TO_SEARCH]


def _results_page(s: ShopSession) -> Page:
    texts = [*_header(s), f"Page {s.page_no} (Total results: {len(s.results)})"]
    buttons = [BACK_TO_SEARCH]
    if s.page_no > 1:
        texts.append(PREV_PAGE)
        buttons.append(PREV_PAGE)
    texts.append(NEXT_PAGE)
    buttons.append(NEXT_PAGE)
    shown = _shown(s)
    links = []
    rows = [" ".join(map(_b, buttons)), f"Page {s.page_no} (Total results: {len(s.results)})"]
    for i in shown:
        product = s.catalog.product(i)
        texts += [product["asin"], product["Title"], product["Price"]]
        links.append(product["asin"])
        rows.append(f"{_b(product['asin'])} {product['Title']}, {product['Price']}")
    clickables = [b.lower() for b in buttons] + [a.lower() for a in links]
    return Page(SEP.join(texts), False, clickables, "\n".join(rows + _next_step(s)))


def _item_page(s: ShopSession) -> Page:
    product = s.catalog.product(s.product_index)  # type: ignore[arg-type]
    texts = [*_header(s), PREV_PAGE]
    values: list[str] = []
    rows = [f"{_b(BACK_TO_SEARCH)} {_b(PREV_PAGE)}", product["Title"], f"Price: {product['Price']}, Rating: {product['Rating']}"]
    for name, option_values in product["options"].items():
        texts += [name, *option_values]
        values += option_values
        rows.append(f"{name}: {' '.join(map(_b, option_values))}")
    texts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *SUB_PAGES, BUY_NOW]
    rows.append(" ".join(map(_b, [*SUB_PAGES, BUY_NOW])))
    buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW]
    clickables = [b.lower() for b in buttons] + list(dict.fromkeys(values))
    return Page(SEP.join(texts), False, clickables, "\n".join(rows + _next_step(s)))


def _sub_page(s: ShopSession) -> Page:
    product = s.catalog.product(s.product_index)  # type: ignore[arg-type]
    texts = [*_header(s), PREV_PAGE]
    if s.sub_page == "Description":
        texts.append(product["Description"])
    elif s.sub_page == "Features":
        texts += product["BulletPoints"]
    else:
        for review in product["Reviews"]:
            texts += [f'"{review.get("title", "")}"', str(review.get("score", "")), review.get("body", "")]
    rows = [f"{_b(BACK_TO_SEARCH)} {_b(PREV_PAGE)}", *(t.strip() for t in texts[len(_header(s)) + 1 :])]
    clickables = [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]
    rows = [r for r in rows if r] + _next_step(s)
    return Page(SEP.join(t.strip() for t in texts), False, clickables, "\n".join(rows))


def done_text(asin: str, options: dict[str, str], reward: float) -> str:
    """WebShop's ``done_page.html`` in text mode (the fields the text environment leaves empty read ``None``)."""
    return SEP.join(
        [
            "Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
            "Purchased", "asin", asin, "options", json.dumps(options), "attrs", "None", "category", "None",
            "query", "None", "product category", "None",
            "Target", "asin", "options", "attrs", "price upper", "instuction text", "category", "product category", "query",
            "Reward", "Your score (min 0.0, max 1.0)", str(reward),
        ]
    )  # fmt: skip


def _done_page(s: ShopSession) -> Page:
    assert s.purchase is not None
    asin, options = s.purchase.product["asin"], s.purchase.options
    compact = f"Thank you for shopping with us! Purchased: {asin.lower()}, options: {json.dumps(options)}. Your score (min 0.0, max 1.0): {s.reward}"
    return Page(done_text(asin, options, s.reward), False, [], compact)


def compact_clickables(text: str) -> list[str]:
    """The clickables of a page in :attr:`Page.compact` form (the values in square brackets), in order."""
    return list(dict.fromkeys(re.findall(r"\[([^\[\]\n]+)\]", text)))


_RENDER = {"search": _search_page, "results": _results_page, "item": _item_page, "sub": _sub_page, "done": _done_page}
