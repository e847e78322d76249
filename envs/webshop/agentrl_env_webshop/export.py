"""Write a generated catalog in WebShop's own file format (then serve it with ``--data DIR``).

    python -m agentrl_env_webshop.export --products 10000 --goals 500 --seed 0 --out DIR

writes ``items_shuffle.json`` (the products as WebShop scraped them), ``items_ins_v2.json``
(their attributes) and ``items_human_ins.json`` (instructions for the first ``--goals`` products),
which :func:`.catalog.load_webshop_products` and :func:`.catalog.load_webshop_goals` read back.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .generator import make_goal, make_product


def webshop_record(product: dict[str, Any]) -> dict[str, Any]:
    """A generated product as an ``items_shuffle.json`` entry."""
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "name": product["Title"],
        "product_category": product["product_category"],
        "full_description": product["Description"],
        "pricing": "".join(f"${p:.2f}" for p in product["pricing"]),
        "images": [""],
        "small_description": product["BulletPoints"],
        "customization_options": {
            name: [{"value": v, "image": None} for v in values] for name, values in product["options"].items()
        }
        or None,
    }


def export(seed: int, products: int, goals: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    items, attributes, human = [], {}, {}
    for i in range(products):
        p = make_product(seed, i)
        items.append(webshop_record(p))
        attributes[p["asin"]] = {"attributes": p["Attributes"]}
        if i < goals:
            g = make_goal(seed, i)
            instruction = g["instruction_text"].split(", and price lower than")[0]
            human[p["asin"]] = [
                {
                    "instruction": instruction,
                    "instruction_attributes": g["attributes"],
                    "instruction_options": g["goal_options"],
                }
            ]
    (out / "items_shuffle.json").write_text(json.dumps(items), encoding="utf-8")
    (out / "items_ins_v2.json").write_text(json.dumps(attributes), encoding="utf-8")
    (out / "items_human_ins.json").write_text(json.dumps(human), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Write a generated WebShop catalog in WebShop's file format.")
    p.add_argument("--products", type=int, default=10_000)
    p.add_argument("--goals", type=int, default=500, help="products (the first ones) that get an instruction")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    export(a.seed, a.products, min(a.goals, a.products), a.out)


if __name__ == "__main__":
    main()
