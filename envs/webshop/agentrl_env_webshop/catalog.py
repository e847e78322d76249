"""Catalogs: the generated one (:class:`GeneratedCatalog`) and WebShop's own files (:class:`FileCatalog`).

A catalog numbers its products ``0..len-1`` and gives, for product ``i``, the WebShop-shaped
product dict (:meth:`product`), the price it sells at (``product["price"]``) and its search
document (:meth:`documents`). ``key`` names the catalog for the on-disk index cache.

WebShop's files (``load_webshop_products``, ``load_webshop_goals``) are read as WebShop's
``engine.load_products`` and ``goal.get_human_goals`` read them, with one difference: WebShop
draws a price range's selling price and the goals' price bounds from the unseeded global
``random``; here they come from ``random.Random(233)`` so a catalog loads the same every time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from agentrl_envs.errors import DataError

from .generator import GENERATOR_VERSION, index_of_asin, make_product, price_bound, search_document

#: File names WebShop's ``web_agent_site/utils.py`` uses (the ``_1000`` variants are its small set).
PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_GOAL_FILE = "items_human_ins.json"


class Catalog(Protocol):
    key: str

    def __len__(self) -> int: ...
    def product(self, i: int) -> dict[str, Any]: ...
    def index_of(self, asin: str) -> int | None: ...
    def documents(self) -> Iterator[tuple[int, str]]: ...


class GeneratedCatalog:
    """Products ``0..size-1`` of the generated catalog ``seed``; nothing is held in memory."""

    def __init__(self, seed: int, size: int) -> None:
        self.seed, self.size = seed, size
        self.key = f"generated-v{GENERATOR_VERSION}-seed{seed}-n{size}"

    def __len__(self) -> int:
        return self.size

    def product(self, i: int) -> dict[str, Any]:
        return make_product(self.seed, i)

    def index_of(self, asin: str) -> int | None:
        i = index_of_asin(self.seed, asin)
        return i if i is not None and i < self.size else None

    def documents(self) -> Iterator[tuple[int, str]]:
        for i in range(self.size):
            yield i, search_document(make_product.__wrapped__(self.seed, i))  # uncached: one pass


class FileCatalog:
    """Products held in memory (WebShop's own files)."""

    def __init__(self, products: list[dict[str, Any]], key: str) -> None:
        self.products = products
        self.key = key
        self._by_asin = {p["asin"]: i for i, p in enumerate(products)}

    def __len__(self) -> int:
        return len(self.products)

    def product(self, i: int) -> dict[str, Any]:
        return self.products[i]

    def index_of(self, asin: str) -> int | None:
        return self._by_asin.get(asin.upper())

    def documents(self) -> Iterator[tuple[int, str]]:
        for i, p in enumerate(self.products):
            yield i, search_document(p)


# ---------------------------------------------------------------------- WebShop's files


def _first(directory: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise DataError(f"{directory} holds none of {', '.join(names)} (WebShop's data files)")


def _parse_pricing(pricing: Any) -> tuple[list[float], str]:
    if not pricing:
        return [100.0], "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in str(pricing).split("$")[1:]]
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def convert_webshop_product(raw: dict[str, Any], attributes: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One ``items_shuffle.json`` entry as WebShop's ``load_products`` turns it into a product."""
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    pricing, tag = _parse_pricing(raw.get("pricing"))
    small = raw.get("small_description")
    bullets = small if isinstance(small, list) else [small or ""]
    asin = raw["asin"]
    attrs = attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"]
    return {
        "asin": asin,
        "category": raw["category"],
        "query": raw["query"].lower().strip(),
        "name": raw["name"],
        "Title": raw["name"],
        "product_category": raw["product_category"],
        "Description": raw.get("full_description") or "",
        "BulletPoints": bullets,
        "Attributes": attrs,
        "options": options,
        "pricing": pricing,
        "Price": tag,
        "price": pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2]),
        "Rating": "N.A.",
        "Reviews": [],
    }


def load_webshop_products(directory: str | Path, limit: int | None = None) -> FileCatalog:
    """WebShop's products from ``directory`` (``items_shuffle.json`` + ``items_ins_v2.json``)."""
    directory = Path(directory).resolve()
    product_file, attribute_file = _first(directory, PRODUCT_FILES), _first(directory, ATTRIBUTE_FILES)
    raw_products = json.loads(product_file.read_text(encoding="utf-8"))
    attributes = json.loads(attribute_file.read_text(encoding="utf-8"))
    if limit is not None:
        raw_products = raw_products[:limit]
    rng = random.Random(233)
    products, seen = [], set()
    for raw in raw_products:
        asin = raw.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue  # WebShop skips these too
        seen.add(asin)
        products.append(convert_webshop_product(raw, attributes, rng))
    stat = product_file.stat()
    digest = hashlib.sha1(f"{product_file}:{stat.st_size}:{stat.st_mtime_ns}:{limit}".encode()).hexdigest()[:16]
    return FileCatalog(products, key=f"file-{digest}")


def load_webshop_goals(directory: str | Path) -> list[dict[str, Any]]:
    """WebShop's human goals (``items_human_ins.json``) over the products of ``directory``, in
    WebShop's order (shuffled with seed 233); each sample also names its catalog (``catalog_dir``)."""
    directory = Path(directory).resolve()
    human_file = directory / HUMAN_GOAL_FILE
    if not human_file.is_file():
        raise DataError(f"{directory} has no {HUMAN_GOAL_FILE} (WebShop's human instructions)")
    catalog = cached_file_catalog(str(directory))
    human = json.loads(human_file.read_text(encoding="utf-8"))
    rng = random.Random(233)
    goals = []
    for i in range(len(catalog)):
        product = catalog.product(i)
        for instruction in human.get(product["asin"], []):
            attributes = instruction.get("instruction_attributes") or []
            if not attributes:
                continue  # WebShop skips goals without attributes
            upper, price_text = price_bound(product["price"], rng)
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": instruction["instruction"].strip(".") + price_text,
                    "attributes": attributes,
                    "price_upper": upper,
                    "goal_options": list(instruction.get("instruction_options") or []),
                    "weight": 1,
                    "catalog_dir": str(directory),
                }
            )
    random.Random(233).shuffle(goals)
    return goals


@functools.lru_cache(maxsize=4)
def cached_file_catalog(directory: str) -> FileCatalog:
    """One :class:`FileCatalog` per directory and process."""
    return load_webshop_products(directory)
