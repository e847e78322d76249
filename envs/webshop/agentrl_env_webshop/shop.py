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
"""

from __future__ import annotations

import json
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


class InvalidAction(Exception):
    """The action cannot be done on the current page; nothing changed."""


@dataclass(frozen=True)
class Page:
    text: str
    has_search_bar: bool
    clickables: list[str]

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

    def _show_results(self, page_no: int) -> None:
        self.page_name, self.page_no, self.options = "results", page_no, {}

    # ------------------------------------------------------------------ pages


def _search_page(s: ShopSession) -> Page:
    return Page(SEP.join(["WebShop", "Instruction:", s.instruction, "Search"]), True, ["search"])


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
    shown = s.results[(s.page_no - 1) * s.page_size : s.page_no * s.page_size]
    links = []
    for i in shown:
        product = s.catalog.product(i)
        texts += [product["asin"], product["Title"], product["Price"]]
        links.append(product["asin"])
    return Page(SEP.join(texts), False, [b.lower() for b in buttons] + [a.lower() for a in links])


def _item_page(s: ShopSession) -> Page:
    product = s.catalog.product(s.product_index)  # type: ignore[arg-type]
    texts = [*_header(s), PREV_PAGE]
    values: list[str] = []
    for name, option_values in product["options"].items():
        texts += [name, *option_values]
        values += option_values
    texts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *SUB_PAGES, BUY_NOW]
    buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW]
    return Page(SEP.join(texts), False, [b.lower() for b in buttons] + list(dict.fromkeys(values)))


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
    return Page(SEP.join(t.strip() for t in texts), False, [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()])


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
    return Page(done_text(s.purchase.product["asin"], s.purchase.options, s.reward), False, [])


_RENDER = {"search": _search_page, "results": _results_page, "item": _item_page, "sub": _sub_page, "done": _done_page}
