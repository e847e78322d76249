"""The ``easy``, ``easy-test`` and ``easy-val`` splits of the WebShop task (deterministic, built at load time).

    python -m agentrl_env_webshop.make_easy             # prints the splits' sizes and first goals
    python -m agentrl_env_webshop.make_easy --example   # writes easy_example.json (the worked example)

Real WebShop goals (the task's own goal dicts, shop, search, transitions and reward) whose
instruction spells out the purchase: the search keywords (the target's brand and model code,
which put it first among the results at every catalog size), the product to click (its ASIN),
the option to click (half of the goals want one option; the others none) and ``buy now``. Each
goal also names one of the product's attributes, and a price bound it meets, so buying the
target with that option scores 1.0 and anything else less (WebShop's graded reward: the target
without its option 2/3).

Samples carry ``"prompt": "easy"``, ``"max_turns"`` (the steps plus one: 4 or 5 rounds) and
``"results_per_page": 2`` (WebShop: 10), read per session. An easy session
(:class:`.shop.ShopSession` with ``compact`` and the goal's :func:`spelled_steps`) opens with a
short system prompt and a worked example as chat turns (:func:`.prompts.opening_messages`) and
shows its pages in a compact text whose last line names the step to take next from that page
(``Next step: click "b003r47bv9"``); while the option the goal wants is not chosen, that line
only says to click the option the instruction asks for (which value is the model's to read from
the instruction). So a whole episode of SmolLM2-135M fits its 2,048-token context (about 1,100
tokens before the first turn, 1,700 after a reference episode's last; tests/test_webshop_easy.py).

Targets are products of the goal pool (0..999, in every catalog): ``easy`` (train, 200 goals)
targets products of the ``train`` split's range 300..999, ``easy-test`` (100, held out: reported
figures only) and ``easy-val`` (100, held out: choosing settings) products 0..249, disjoint from
each other; no product is the target of two easy goals. The worked example buys product 250,
which no split targets. Each split is drawn with its own seed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

from .generator import GOAL_POOL, goal_noun, instruction_text, make_product, price_bound, target_fields

TRAIN_SIZE = 200
TEST_SIZE = 100
VAL_SIZE = 100
RESULTS_PER_PAGE = 2
#: Share of goals that want one option value (the others none).
OPTION_SHARE = 0.5
#: Product of the worked example (:data:`.prompts.EASY_EXAMPLES`); no split targets 250..299.
EXAMPLE_PRODUCT = 250

#: split -> (seed, size, target products)
SPLITS: dict[str, tuple[int, int, range]] = {
    "easy": (20261, TRAIN_SIZE, range(300, GOAL_POOL)),
    "easy-test": (20262, TEST_SIZE, range(0, 250)),
    "easy-val": (20263, VAL_SIZE, range(0, 250)),
}


def search_keywords(product: dict[str, Any]) -> str:
    """The target's brand and model code, lowercased (e.g. ``coraraia pa-839``): its own search hits it first."""
    title = product["Title"]
    code = re.search(r"\b[A-Z]{2}-\d+\b", title)
    assert code is not None, title
    return f"{title.split()[0]} {code.group(0)}".lower()


def easy_goal(seed: int, i: int, rng: random.Random, *, with_option: bool | None = None) -> dict[str, Any]:
    """An easy goal for product ``i`` of catalog ``seed``: a WebShop goal dict plus the spelled-out
    steps; it wants one option value if ``with_option`` (``None``: half of the time)."""
    product = make_product(seed, i)
    attributes = rng.sample(product["Attributes"], k=1)
    options: list[str] = []
    if rng.random() < OPTION_SHARE if with_option is None else with_option:
        values = rng.choice(list(product["options"].values()))
        options = [rng.choice(values)]
    upper, price_text = price_bound(product["price"], rng)
    keywords = search_keywords(product)
    clicks = [product["asin"].lower(), *options, "buy now"]
    steps = f'search "{keywords}", ' + ", ".join(f'click "{c}"' for c in clicks)
    request = instruction_text(goal_noun(product), attributes, options, rng)
    return {
        **target_fields(product),
        "instruction_text": f"{request}{price_text}. Steps: {steps}.",
        "attributes": attributes,
        "price_upper": upper,
        "goal_options": options,
        "weight": 1,
        "keywords": keywords,
        "prompt": "easy",
        "max_turns": len(clicks) + 2,
        "results_per_page": RESULTS_PER_PAGE,
    }


def make_splits(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The three easy splits over catalog ``seed``; no product is the target of two goals."""
    used: set[int] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for split, (split_seed, size, pool) in SPLITS.items():
        rng = random.Random(split_seed)
        products = rng.sample([i for i in pool if i not in used], size)
        used.update(products)
        out[split] = [easy_goal(seed, i, rng) for i in products]
    return out


def spelled_steps(goal: dict[str, Any]) -> list[tuple[str, str]]:
    """The steps an easy goal's instruction spells out, in order: ``("search", keywords)``, then
    ``("click", value)`` for the ASIN, each option value and ``buy now``."""
    clicks = [goal["asin"].lower(), *goal["goal_options"], "buy now"]
    return [("search", goal["keywords"]), *(("click", c) for c in clicks)]


def steps(goal: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """The tool calls an easy goal's instruction spells out, in order."""
    return [
        ("search_action", {"keywords": v}) if verb == "search" else ("click_action", {"value": v})
        for verb, v in spelled_steps(goal)
    ]


def example_goal(seed: int = 0) -> dict[str, Any]:
    """The worked example's goal: product :data:`EXAMPLE_PRODUCT`, with one option."""
    return easy_goal(seed, EXAMPLE_PRODUCT, random.Random(EXAMPLE_PRODUCT), with_option=True)


async def record_example(runtime: Any) -> list[dict[str, Any]]:
    """Play :func:`example_goal`'s steps through the task on ``runtime`` (an open
    :class:`~agentrl_envs.TaskRuntime` of webshop); the exchange as worked-example messages."""
    from agentrl_envs.protocol.openai import worked_example

    episode = runtime.episode(-1, custom_task=example_goal())
    first = await episode.start()
    calls = []
    for n, (name, arguments) in enumerate(steps(episode.task.sample)):
        call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        out = await episode.step([{"role": "assistant", "content": None, "tool_calls": [call]}])
        calls.append((name, arguments, out.messages[0]["content"]))
    assert out.finish and out.reward == 1.0, (out.status, out.reward)
    return worked_example(first.messages[-1]["content"], calls, id_prefix="example")


async def _write_example(path: Path) -> None:
    from agentrl_envs import TaskRuntime, get_task

    # The smallest catalog (its index is quick to build; the tests replay the example on it).
    runtime = TaskRuntime(get_task("webshop"), split="dev", config={"products": GOAL_POOL})
    await runtime.open()
    try:
        messages = await record_example(runtime)
    finally:
        await runtime.close()
    path.write_text(json.dumps(messages, indent=1) + "\n", encoding="utf-8")
    print(f"wrote the worked example ({len(messages)} messages) to {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", action="store_true", help="write the worked example (easy_example.json)")
    if p.parse_args().example:
        from .prompts import EASY_EXAMPLE_FILE

        asyncio.run(_write_example(Path(__file__).parent / EASY_EXAMPLE_FILE))
        return
    for split, goals in make_splits().items():
        print(f"{split}: {len(goals)} goals; first: {goals[0]['instruction_text']}")


if __name__ == "__main__":
    main()
