"""``webshop``: AgentBench's FC WebShop task — find and buy the product an instruction describes.

The model sees AgentBench's prompt and the shop's opening page, then acts with
``search_action(keywords)`` and ``click_action(value)`` (20 rounds). Buying (``buy now``) ends
the episode with WebShop's reward (:mod:`.reward`); its parts go into the episode's metrics.
Both tools run on the worker's event loop (``async def``): tantivy holds the GIL while it searches
(about 1 ms at 100,000 products, 6-8 ms at 1,000,000), so a worker thread would only add a hop
and contention (README, Performance).

Every session of a worker shares one catalog and its search index (:class:`Shops`): the generated
catalog of ``products`` products (option ``products``; goals target its first 1,000, so any size
from 1,000 up serves every split), or the WebShop files a ``--data`` directory names (loaded on
the first session that needs them).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pydantic import BaseModel, Field

from agentrl_envs.task import Task, TaskConfig, tool

from .catalog import Catalog, GeneratedCatalog, cached_file_catalog
from .generator import MIN_PRODUCTS
from .html import render_message_html
from .prompts import opening_messages, tool_output
from .reference import WebShopReference
from .reward import reward
from .samples import CATALOG_SEED, load_data, load_split, validate_goal
from .search import SearchIndex
from .shop import PRODUCT_WINDOW, InvalidAction, Page, ShopSession


class WebShopConfig(TaskConfig):
    """Options of the WebShop task.

    Catalog:
        products: size of the generated catalog (at least 1,000; 1,000,000 works too).
        index_dir: where search indexes are kept (default ``~/.cache/agentrl-envs/webshop``).

    Limits:
        max_turns: round limit of every session (unset: the sample's ``max_turns``, else 20).
    """

    products: int = Field(10_000, ge=MIN_PRODUCTS, description="Products in the generated catalog (>= 1000).")
    index_dir: str | None = Field(
        None, description="Directory of the search index cache (default ~/.cache/agentrl-envs/webshop)."
    )


class Shops:
    """A worker's catalogs and their indexes, shared by all its sessions (and cached per process)."""

    _cache: dict[tuple[str, str | None], tuple[Catalog, SearchIndex]] = {}
    _lock = threading.Lock()

    def __init__(self, config: WebShopConfig) -> None:
        self.config = config
        self.generated = self._open(GeneratedCatalog(CATALOG_SEED, config.products))

    def _open(self, catalog: Catalog) -> tuple[Catalog, SearchIndex]:
        key = (catalog.key, self.config.index_dir)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = (catalog, SearchIndex.open_or_build(catalog, self.config.index_dir))
            return self._cache[key]

    async def for_sample(self, sample: dict[str, Any]) -> tuple[Catalog, SearchIndex]:
        directory = sample.get("catalog_dir")
        if directory is None:
            return self.generated
        return await asyncio.to_thread(lambda: self._open(cached_file_catalog(str(directory))))


class WebShopTask(Task):
    name = "webshop"
    max_turns = 20
    #: ``easy`` (200 goals), ``easy-test`` (100, held out, for reporting) and ``easy-val`` (100,
    #: held out, for choosing settings): spelled-out purchases for small models (:mod:`.make_easy`).
    splits = ("dev", "train", "test", "easy", "easy-test", "easy-val")
    concurrency = 64
    Config = WebShopConfig

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)  # generated
    load_data = staticmethod(load_data)  # WebShop's files in a directory, or a .json/.jsonl of goals

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        return validate_goal(custom_task, "custom_task")

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]) -> WebShopReference:
        return WebShopReference(sample)

    @classmethod
    def render_message_html(cls, message: dict[str, Any]) -> str | None:
        """A message's WebShop page as HTML, for the evaluation report (:mod:`.html`)."""
        return render_message_html(message)

    @classmethod
    async def open_resources(cls, config: BaseModel) -> Shops:
        assert isinstance(config, WebShopConfig)
        return await asyncio.to_thread(Shops, config)

    @classmethod
    async def close_resources(cls, resources: Any) -> None:
        """Nothing to release: catalogs and indexes stay cached for the process's next runtime."""

    # ------------------------------------------------------------------ session

    #: the session's shop (pages, cart), made in ``setup``
    shop: ShopSession | None = None

    async def setup(self) -> list[dict[str, Any]]:
        if self.resources is None:
            raise RuntimeError("the webshop task needs its catalog: open it with TaskRuntime.open() / open_resources")
        from .make_easy import spelled_steps  # not at import: ``python -m`` runs that module

        catalog, index = await self.resources.for_sample(self.sample)
        if catalog.index_of(self.sample["asin"]) is None:
            raise RuntimeError(f"the goal's product {self.sample['asin']} is not in the catalog ({len(catalog)} products)")
        prompt = self.sample.get("prompt")
        self.shop = ShopSession(
            catalog,
            index,
            self.sample["instruction_text"],
            page_size=self.sample.get("results_per_page") or PRODUCT_WINDOW,
            compact=prompt == "easy",
            steps=spelled_steps(self.sample) if prompt == "easy" else [],
        )
        page = self.shop.page()
        return opening_messages(self._shown(page), page.available_actions(), prompt)

    @tool
    async def search_action(self, keywords: str) -> str:
        """Use search functionality with specified keywords.

        Args:
            keywords: The keywords to use in the search function.
        """
        return self._act(f"search[{keywords}]", lambda shop: shop.search(keywords))

    @tool
    async def click_action(self, value: str) -> str:
        """Click a button or link with a specified value.

        Args:
            value: The value to click from the list of available actions.
        """
        return self._act(f"click[{value}]", lambda shop: shop.click(value))

    def _act(self, action: str, do: Any) -> str:
        shop = self.shop
        assert shop is not None
        prompt = self.sample.get("prompt")
        try:
            page: Page = do(shop)
        except InvalidAction as e:
            page = shop.page()
            if shop.compact:  # the page has not changed: shown just above, so only the next step
                return "\n".join(x for x in (f"Invalid action: {e}", shop.next_step()) if x)
            return tool_output(action, f"Invalid action: {e}\n\n{page.text}", page.available_actions(), prompt)
        if shop.purchase is not None:
            page = self._score(shop)
        return tool_output(action, self._shown(page), page.available_actions(), prompt)

    def _shown(self, page: Page) -> str:
        """The page as this session shows it (compact for the easy splits)."""
        assert self.shop is not None
        return page.compact if self.shop.compact else page.text

    def _score(self, shop: ShopSession) -> Page:
        assert shop.purchase is not None
        product = shop.purchase.product
        parts = reward(product, self.sample, product["price"], shop.purchase.options)
        shop.reward = parts.reward
        self.finish(
            parts.reward,
            **parts.metrics(),
            bought_asin=product["asin"],
            correct_product=product["asin"] == self.sample["asin"],
            searches=shop.searches,
            clicks=shop.clicks,
        )
        return shop.page()
