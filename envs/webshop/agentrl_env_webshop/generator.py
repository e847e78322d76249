"""A deterministic catalog and goal generator (WebShop's data cannot be downloaded here).

Product ``i`` of the catalog with seed ``s`` is a pure function :func:`make_product` of ``(s, i)``:
a catalog of N products is products ``0..N-1``, so a larger catalog only adds products, and a
worker keeps none of them in memory (it regenerates the few it shows; only the search index
stays). Products are WebShop-shaped dicts (``Title``, ``BulletPoints``, ``Description``,
``options``, ``Attributes``, ``pricing``, ``Price``...) over the product types of :mod:`.vocab`.

Goals (:func:`make_goal`) are WebShop human-goal dicts (``instruction_text``, ``attributes``,
``goal_options`` as a list of option values, ``price_upper`` drawn as WebShop draws it) for
target products among the first :data:`GOAL_POOL` products, so the same goals hold for every
catalog size from :data:`MIN_PRODUCTS` up.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from .vocab import BRANDS, DESCRIPTORS, TYPES

#: Bumped whenever generated products change (it keys the on-disk search index cache).
GENERATOR_VERSION = 1
#: Goals target products ``0..GOAL_POOL-1``; the smallest catalog holds them all.
GOAL_POOL = 1000
MIN_PRODUCTS = GOAL_POOL

#: WebShop's price bounds (``goal.py``: ``PRICE_RANGE``).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]

_ASIN_SPACE = 36**8
_ASIN_MULT = 1_000_003  # prime, coprime with 36**8: i -> asin is a bijection
_ASIN_MULT_INV = pow(_ASIN_MULT, -1, _ASIN_SPACE)
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _offset(seed: int) -> int:
    return ((seed + 1) * 7_919_993_447) % _ASIN_SPACE


def asin_of(seed: int, i: int) -> str:
    """Product ``i``'s ASIN: ``B0`` and 8 base-36 digits, unique within a catalog."""
    n = (i * _ASIN_MULT + _offset(seed)) % _ASIN_SPACE
    digits = []
    for _ in range(8):
        n, d = divmod(n, 36)
        digits.append(_DIGITS[d])
    return "B0" + "".join(reversed(digits))


def index_of_asin(seed: int, asin: str) -> int | None:
    """Inverse of :func:`asin_of` (``None`` for a string that is no generated ASIN)."""
    asin = asin.upper()
    if len(asin) != 10 or not asin.startswith("B0") or any(c not in _DIGITS for c in asin[2:]):
        return None
    n = 0
    for c in asin[2:]:
        n = n * 36 + _DIGITS.index(c)
    return ((n - _offset(seed)) * _ASIN_MULT_INV) % _ASIN_SPACE


def _rng(seed: int, i: int, salt: int = 0) -> random.Random:
    return random.Random((seed * 1_000_000_007 + i) * 8 + salt)


_BULLETS = (
    "{A}: this {noun} is made to be {a}, tested for everyday use.",
    "{A} - {brand} designs every {noun} with care; {a} and built to last.",
    "WHY {BRAND}: a {noun} you can trust, {a}, backed by a 30-day return policy.",
    "{A}: enjoy a {noun} that is {a} without compromise.",
    "WHAT YOU GET: 1 x {noun}, user manual, and friendly customer service.",
)
_DESCRIPTIONS = (
    "The {brand} {model} {noun} is {a}. {b_cap} makes it a favourite for daily use.",
    "Looking for a {noun}? This one from {brand} is {a} and {b}. Model {model}.",
    "{brand} brings you a {noun} that is {a}. Designed with attention to detail, it is also {b}.",
)


def _price_tag(pricing: list[float]) -> str:
    return f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"


@functools.lru_cache(maxsize=8192)
def make_product(seed: int, i: int) -> dict[str, Any]:
    """Product ``i`` of catalog ``seed`` (treat as read-only: results are cached)."""
    rng = _rng(seed, i)
    kind = TYPES[rng.randrange(len(TYPES))]
    brand = BRANDS[rng.randrange(len(BRANDS))]
    model = f"{_DIGITS[10 + rng.randrange(26)]}{_DIGITS[10 + rng.randrange(26)]}-{rng.randrange(100, 10000)}"
    noun = kind.nouns[rng.randrange(len(kind.nouns))]
    attributes = rng.sample(kind.attributes, k=rng.randint(3, min(5, len(kind.attributes))))
    descriptor = DESCRIPTORS[rng.randrange(len(DESCRIPTORS))]
    lead = attributes[0].title()
    title = f"{brand} {descriptor} {lead} {noun} {model}, {attributes[1].title()}"
    if rng.random() < 0.5:
        title += f" and {attributes[2].title()}"

    options: dict[str, list[str]] = {}
    for n, (name, values) in enumerate(kind.options):
        if n > 0 and rng.random() < 0.2:
            continue
        chosen = set(rng.sample(values, k=rng.randint(min(2, len(values)), min(6, len(values)))))
        options[name] = [v for v in values if v in chosen]

    lo, hi = kind.price
    first = max(1.99, round(rng.uniform(lo, hi)) - 0.01)
    pricing = [round(first, 2)]
    if rng.random() < 0.25:
        pricing.append(round(round(first * rng.uniform(1.1, 1.6)) + 0.99, 2))
    # WebShop (``generate_product_prices``): a price range sells at a uniform draw within it
    price = pricing[0] if len(pricing) == 1 else round(rng.uniform(pricing[0], pricing[1]), 2)

    words = {"noun": noun.lower(), "brand": brand, "BRAND": brand.upper(), "model": model}
    bullets = []
    for n, template in enumerate(rng.sample(_BULLETS, k=4)):
        a = attributes[n % len(attributes)]
        bullets.append(template.format(A=a.upper(), a=a, **words))
    a, b = attributes[-1], attributes[-2]
    description = _DESCRIPTIONS[rng.randrange(len(_DESCRIPTIONS))].format(a=a, b=b, b_cap=b.capitalize(), **words)
    return {
        "asin": asin_of(seed, i),
        "category": kind.category,
        "query": kind.query,
        "name": title,
        "Title": title,
        "product_category": kind.path,
        "Description": description,
        "BulletPoints": bullets,
        "Attributes": list(attributes),
        "options": options,
        "pricing": pricing,
        "Price": _price_tag(pricing),
        "price": price,
        "Rating": "N.A.",
        "Reviews": [],
    }


def search_document(product: dict[str, Any]) -> str:
    """The text WebShop indexes for a product (``search_engine/convert_product_file_format.py``):
    title, description, first bullet point and the options, lowercased."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    first_bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """WebShop's goal price bound: the larger of two draws among the 4 multiples of 10 above the
    price, and its instruction text; no bound (1,000,000, no text) when fewer than 2 are left."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return 1_000_000.0, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


_OPENERS = (
    "i'm looking for {what}",
    "i need {what}",
    "find me {what}",
    "i want to buy {what}",
    "can you get me {what}",
    "i am searching for {what}",
)


def goal_noun(product: dict[str, Any]) -> str:
    """What a goal calls ``product``: the longest of its type's nouns found in its title, lowercased."""
    nouns = next(t for t in TYPES if t.query == product["query"]).nouns
    return max((n for n in nouns if n in product["Title"]), key=len).lower()


def instruction_text(noun: str, attributes: list[str], option_values: list[str], rng: random.Random) -> str:
    """A human-goal-like request for ``noun`` with ``attributes`` and ``option_values`` (no price)."""
    shape = rng.randrange(3)
    if shape == 0:
        what = f"{' and '.join(attributes)} {noun}"
    elif shape == 1:
        what = f"{noun} that is {' and '.join(attributes)}"
    else:
        what = f"{attributes[0]} {noun}" + (f" with {' and '.join(attributes[1:])}" if len(attributes) > 1 else "")
    text = rng.choice(_OPENERS).format(what=what)
    if option_values:
        joiner = rng.choice((" in ", ", ", " with "))
        text += joiner + ", ".join(option_values)
    return text


def target_fields(product: dict[str, Any]) -> dict[str, Any]:
    """The fields of a goal dict that name its target ``product`` (WebShop's goal keys)."""
    return {k: product[k] for k in ("asin", "category", "query", "name", "product_category")}


def make_goal(seed: int, i: int, variant: int = 0) -> dict[str, Any]:
    """A goal whose target is product ``i`` (``variant`` draws another goal for the same product)."""
    product = make_product(seed, i)
    rng = _rng(seed, i, salt=1 + variant)
    attributes = rng.sample(product["Attributes"], k=rng.randint(1, min(3, len(product["Attributes"]))))
    goal_options = [rng.choice(values) for values in product["options"].values()]
    upper, price_text = price_bound(product["price"], rng)
    instruction = instruction_text(goal_noun(product), attributes, goal_options, rng)
    return {
        **target_fields(product),
        "instruction_text": instruction.strip(".") + price_text,
        "attributes": attributes,
        "price_upper": upper,
        "goal_options": goal_options,
        "weight": 1,
    }
