"""The nouns and proper nouns of a product name, for the type reward (:func:`.reward.type_reward`).

WebShop tags names with spaCy's ``en_core_web_lg`` (its ``goal.py`` and AgentBench's copy load
that model) and keeps tokens tagged ``NOUN`` or ``PROPN``. The model is not on PyPI, so: when
``spacy`` and ``en_core_web_lg`` (or else ``en_core_web_sm``) are importable (``pip install
'agentrl-env-webshop[spacy]'`` plus the model) they are used, exactly as WebShop does; otherwise a
small lexical tagger stands in (spaCy itself is not even imported then). It splits like spaCy (words, numbers, punctuation), drops
closed-class words (determiners, prepositions, pronouns, conjunctions), numbers, punctuation,
known adjectives (the generated catalog's descriptive words and common ones) and words with
adjective or adverb endings, and calls the rest nouns. Product names are mostly noun phrases, so
the two agree on most names; both sides of a comparison go through the same tagger, so buying
the goal's own product always scores ``title_score = 1``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable

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
    """The lowercased tokens of ``text`` that the lexical tagger calls nouns (see the module docstring)."""
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


#: spaCy models tried in order: WebShop's ``goal.py`` (and AgentBench's copy) load ``en_core_web_lg``.
SPACY_MODELS = ("en_core_web_lg", "en_core_web_sm")


@functools.lru_cache(maxsize=1)
def _spacy_tagger() -> Callable[[str], list[str]] | None:
    # Look for a model before importing spaCy: the import alone pulls in thinc (and torch, when
    # installed), hundreds of MB and seconds of a worker's start, for nothing without a model.
    model = next((m for m in SPACY_MODELS if importlib.util.find_spec(m) is not None), None)
    if model is None:
        return None
    try:
        import spacy

        nlp = spacy.load(model)
    except Exception:  # spaCy missing or the model unusable: the lexical tagger stands in
        return None

    def tag(text: str) -> list[str]:
        return [t.text.lower() for t in nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]

    return tag


def noun_tokens(text: str) -> list[str]:
    """WebShop's noun list of ``text``: spaCy (:data:`SPACY_MODELS`) if a model is installed, else :func:`lexical_noun_tokens`."""
    spacy_tag = _spacy_tagger()
    return spacy_tag(text) if spacy_tag is not None else lexical_noun_tokens(text)


def tagger_name() -> str:
    """Which tagger :func:`noun_tokens` uses: ``"spacy"`` or ``"lexical"``."""
    return "spacy" if _spacy_tagger() is not None else "lexical"
