"""The splits of generated goals, WebShop's own goal files, and sample validation.

A sample is a WebShop goal dict (:func:`.generator.make_goal`); goals over WebShop's files also
carry ``catalog_dir``. Splits (catalog seed 0) target disjoint products of the goal pool:

======  =====  ==========================================
split   goals  target products
======  =====  ==========================================
test    200    0..199, one goal each (AgentBench's webshop-std has 200)
dev     50     200..249, one goal each
train   2100   300..999, three goals each
======  =====  ==========================================

The ``easy``, ``easy-test`` and ``easy-val`` splits (:mod:`.make_easy`) are goals whose
instruction spells out the purchase; their samples also carry ``keywords`` (the search the
steps name), ``prompt: "easy"``, ``max_turns`` and ``results_per_page``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl_envs.errors import DataError

from .catalog import load_webshop_goals
from .generator import make_goal

CATALOG_SEED = 0
SPLITS: dict[str, tuple[range, int]] = {
    "dev": (range(200, 250), 1),
    "train": (range(300, 1000), 3),
    "test": (range(0, 200), 1),
}
EASY_SPLITS = ("easy", "easy-test", "easy-val")
REQUIRED = ("asin", "query", "name", "product_category", "instruction_text", "attributes", "goal_options", "price_upper")


def load_split(split: str) -> list[dict[str, Any]]:
    if split in EASY_SPLITS:
        from .make_easy import make_splits  # not at import: ``python -m`` runs that module

        return make_splits(CATALOG_SEED)[split]
    if split not in SPLITS:
        raise DataError(f"webshop has no split {split!r}; its splits are {[*SPLITS, *EASY_SPLITS]}")
    products, variants = SPLITS[split]
    return [make_goal(CATALOG_SEED, i, variant) for i in products for variant in range(variants)]


def load_data(data: str | Path) -> list[dict[str, Any]]:
    """A directory of WebShop's files (human goals over its products), or a .json/.jsonl file of goal dicts."""
    path = Path(data)
    if path.is_dir():
        return load_webshop_goals(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file or directory")
    text = path.read_text(encoding="utf-8")
    goals = json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines() if line.strip()]
    return [validate_goal(g, f"{path}[{i}]") for i, g in enumerate(goals)]


def validate_goal(goal: Any, where: str) -> dict[str, Any]:
    if not isinstance(goal, dict):
        raise DataError(f"{where}: a goal is a JSON object, got {type(goal).__name__}")
    missing = [k for k in REQUIRED if k not in goal]
    if missing:
        raise DataError(f"{where}: the goal lacks {', '.join(missing)}")
    if not goal["attributes"]:
        raise DataError(f"{where}: the goal has no attributes (WebShop skips such goals)")
    if goal.get("prompt") not in (None, "agentbench", "easy"):
        raise DataError(f'{where}: prompt must be "agentbench" or "easy", got {goal["prompt"]!r}')
    if goal.get("prompt") == "easy" and not isinstance(goal.get("keywords"), str):
        raise DataError(f'{where}: a goal with prompt "easy" needs its search "keywords" (the first of its steps)')
    per_page = goal.get("results_per_page")
    if per_page is not None and (type(per_page) is not int or per_page < 1):
        raise DataError(f"{where}: results_per_page must be a positive integer, got {per_page!r}")
    return goal
