"""WebShop's reward (``web_agent_site/engine/goal.py``, ``get_reward``), as pure functions.

Products and goals are WebShop-shaped dicts:

* product: ``Title``, ``name``, ``query``, ``product_category`` (levels joined by ``›``),
  ``Attributes`` (list), ``BulletPoints`` (list), ``Description``;
* goal: ``name``, ``query``, ``product_category``, ``attributes`` (list), ``goal_options`` (list of
  option values, as in WebShop's human goals), ``price_upper``.

The total is ``(attribute matches + option matches + price ok) / (#attributes + #options + 1)``
times the type factor ``r_type`` in {1, 0.5, 0.1, 0}. Matching uses ``thefuzz``'s
``token_set_ratio > 85`` (options after :func:`normalize_color`), the thresholds WebShop uses.
The type factor needs the nouns and proper nouns of both product names: WebShop asks spaCy's
``en_core_web_sm``; here :func:`agentrl_env_webshop.nouns.name_nouns` gives the same lists
(spaCy's tags precomputed for generated products, spaCy itself where installed), or a tagger
passed in (``nouns``: name -> noun list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from thefuzz import fuzz

from .nouns import name_nouns

#: A fuzzy match counts when thefuzz's ``token_set_ratio`` is above this (WebShop: 85).
MATCH_THRESHOLD = 85

#: WebShop's ``COLOR_SET`` (``engine/normalize.py``): the first of these found in an option value
#: stands for it, so "navy blue" and "blue" match.
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel "
    "camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry "
    "cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green "
    "grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot "
    "midnight mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum "
    "purple rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone stonewash "
    "sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
).split()


def normalize_color(value: str) -> str:
    """The first :data:`COLOR_SET` entry contained in ``value`` (substring test, list order), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def fuzzy_match(a: str, b: str) -> bool:
    """WebShop's match test: ``fuzz.token_set_ratio(a, b) > 85``."""
    return fuzz.token_set_ratio(a, b) > MATCH_THRESHOLD


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: dict[str, Any], goal: dict[str, Any], nouns: Callable[[str], list[str]] | None = None) -> TypeReward:
    """Is the bought product the goal's kind of product? WebShop's ``get_type_reward``.

    ``title_score``: the share of the goal name's nouns found among the product name's nouns
    (0.2 when the goal name has none). ``r_type`` is 1, then 0.5 unless the queries are equal, or
    at least 2 category levels are shared, or ``title_score > 0.2``; 0.1 if ``title_score < 0.1``;
    0 if ``title_score == 0``."""
    query_match = product["query"] == goal["query"]
    bought_levels = {x.strip() for x in product["product_category"].split("›")}
    goal_levels = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    bought_nouns = set(nouns(product["name"]) if nouns else name_nouns(product))
    wanted_nouns = nouns(goal["name"]) if nouns else name_nouns(goal)
    title_score = 0.2 if not wanted_nouns else len(bought_nouns & set(wanted_nouns)) / len(wanted_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def attribute_matches(product: dict[str, Any], goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has: a fuzzy match with one of its ``Attributes``, or
    (failing that) the attribute as a substring of its lowercased title, bullet points or description."""
    title = product["Title"].lower()
    bullets = " ".join(product["BulletPoints"]).lower()
    description = product["Description"].lower()
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_match(have, wanted) for have in product["Attributes"]):
            matches += 1
        elif wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches


def option_matches(chosen_options: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal options are among the chosen ones (both sides color-normalized, fuzzy matched)."""
    chosen = [normalize_color(o) for o in chosen_options]
    return sum(any(fuzzy_match(c, normalize_color(g)) for c in chosen) for g in goal_options)


@dataclass(frozen=True)
class Reward:
    """The total and its parts (WebShop's ``verbose`` info, plus the match counts)."""

    reward: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool
    w_att: float
    w_option: float
    w_price: float
    attribute_matches: int
    option_matches: int
    query_match: bool
    category_match: bool
    title_score: float

    def metrics(self) -> dict[str, Any]:
        """The parts, for an episode's metrics (the total is the episode's reward)."""
        parts = asdict(self)
        del parts["reward"]
        return parts


def reward(
    product: dict[str, Any],
    goal: dict[str, Any],
    price: float,
    options: dict[str, str],
    nouns: Callable[[str], list[str]] | None = None,
) -> Reward:
    """Score buying ``product`` at ``price`` with the chosen ``options`` ({option name: value}) for ``goal``."""
    kind = type_reward(product, goal, nouns)
    attributes = list(goal["attributes"])
    goal_options = list(goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"])
    n_att = attribute_matches(product, attributes)
    n_opt = option_matches(options.values(), goal_options)
    r_price = price <= goal["price_upper"]
    parts = len(attributes) + len(goal_options) + 1
    total = (n_att + n_opt + r_price) / parts * kind.r_type
    return Reward(
        reward=total,
        r_type=kind.r_type,
        r_att=n_att / len(attributes) if attributes else 0.0,
        r_option=n_opt / len(goal_options) if goal_options else None,
        r_price=bool(r_price),
        w_att=len(attributes) / parts,
        w_option=len(goal_options) / parts,
        w_price=1 / parts,
        attribute_matches=n_att,
        option_matches=n_opt,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
    )
