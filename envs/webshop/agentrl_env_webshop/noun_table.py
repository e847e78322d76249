"""spaCy's noun tags of generated product titles, precomputed (WebShop's type reward without spaCy).

WebShop's ``get_type_reward`` keeps the tokens of a product name that ``en_core_web_sm`` tags
``NOUN`` or ``PROPN``. The tags come from the whole pipeline (``nlp(name)``: the parser's labels
feed the attribute ruler, so ``Fast`` in "Compact Fast Charging" is ``AUX`` with the parser and
``PROPN`` without it), so they cannot be derived word by word: this module stores them per
product. ``data/title_nouns.bin`` holds, for products ``0..count-1`` of the generated catalog
(seed :data:`.samples.CATALOG_SEED`), one 32-bit mask per title: bit ``k`` says whether token ``k``
of :func:`title_tokens` is a noun. Stored XORed with :func:`default_mask` (most title tokens are
nouns), so the file is mostly zeros and ``lzma`` packs it small.

:func:`title_tokens` splits a generated title exactly as spaCy's English tokenizer does (spaces,
a trailing comma, a hyphen between letters); the builder checks that on every title it stores.

Build (needs spaCy and the model: ``pip install 'agentrl-env-webshop[spacy]'``)::

    python -m agentrl_env_webshop.build_noun_table --products 100000 [--workdir DIR] [--jobs 1]

The header records the model (name, version), spaCy's version, the generator version and a
digest of the first titles: :func:`load` refuses a table of another generator version, and the
test checks the digest against the current generator.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import re
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

from .generator import GENERATOR_VERSION, make_product

TABLE_PATH = Path(__file__).with_name("data") / "title_nouns.bin"
#: The catalog seed the table covers (:data:`.samples.CATALOG_SEED`; not imported: no cycle).
SEED = 0
#: Titles hashed into the header's ``titles_sha256`` (the first ones; all would take minutes).
DIGEST_TITLES = 10_000
MAGIC = b"AGENTRL-TITLE-NOUNS-1\n"
NOUN_POS = ("PNOUN", "NOUN", "PROPN")  # goal.py's test, PNOUN included as it is written there

_COMMA = re.compile(r"^(.*[^,])(,+)$")
_LETTER_HYPHEN = re.compile(r"(?<=[A-Za-z])-(?=[A-Za-z])")


def title_tokens(title: str) -> list[str]:
    """The tokens spaCy's English tokenizer makes of a generated title: words split on spaces,
    a trailing comma split off, ``T-Shirt`` -> ``T``, ``-``, ``Shirt`` (a hyphen between letters
    is an infix; ``AB-123`` stays whole). Checked against spaCy on every title the table holds."""
    tokens: list[str] = []
    for word in title.split():
        m = _COMMA.match(word)
        commas = ""
        if m:
            word, commas = m.group(1), m.group(2)
        parts = _LETTER_HYPHEN.split(word)
        for n, part in enumerate(parts):
            if n:
                tokens.append("-")
            tokens.append(part)
        tokens.extend(commas)
    return tokens


def default_mask(tokens: list[str]) -> int:
    """The guess the table is stored against: every token with a letter is a noun except ``and``."""
    mask = 0
    for k, tok in enumerate(tokens):
        if any(c.isalpha() for c in tok) and tok != "and":
            mask |= 1 << k
    return mask


def titles_digest(n: int) -> str:
    h = hashlib.sha256()
    for i in range(n):
        h.update(make_product.__wrapped__(SEED, i)["name"].encode())
        h.update(b"\n")
    return h.hexdigest()


def encode(header: dict[str, Any], masks: array) -> bytes:
    body = json.dumps(header, sort_keys=True).encode()
    payload = MAGIC + struct.pack("<I", len(body)) + body + masks.tobytes()
    return lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME)


def decode(blob: bytes) -> tuple[dict[str, Any], array]:
    raw = lzma.decompress(blob)
    if not raw.startswith(MAGIC):
        raise ValueError("not a title noun table")
    at = len(MAGIC)
    (size,) = struct.unpack_from("<I", raw, at)
    header = json.loads(raw[at + 4 : at + 4 + size])
    masks = array("I")
    masks.frombytes(raw[at + 4 + size :])
    if sys.byteorder != "little":
        masks.byteswap()
    if len(masks) != header["count"]:
        raise ValueError(f"table holds {len(masks)} masks, header says {header['count']}")
    return header, masks


@functools.lru_cache(maxsize=1)
def load(path: Path = TABLE_PATH) -> tuple[dict[str, Any], array] | None:
    """The shipped table (header, XORed masks), or ``None`` when it is missing or was built for
    another generator version (its tags would belong to other titles)."""
    try:
        header, masks = decode(path.read_bytes())
    except (OSError, ValueError, lzma.LZMAError):
        return None
    if header.get("generator_version") != GENERATOR_VERSION or header.get("seed") != SEED:
        return None
    return header, masks


def table_nouns(i: int, title: str) -> list[str] | None:
    """goal.py's noun list of product ``i``'s ``title`` from the table; ``None`` when the table does
    not hold product ``i`` or ``title`` is not its title."""
    table = load()
    if table is None or not 0 <= i < len(table[1]):
        return None
    if make_product(SEED, i)["name"] != title:
        return None
    tokens = title_tokens(title)
    mask = table[1][i] ^ default_mask(tokens)
    return [tok.lower() for k, tok in enumerate(tokens) if mask >> k & 1]
