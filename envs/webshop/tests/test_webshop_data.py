"""The generated catalog and goals, the splits, and WebShop's own file format (--data)."""

from __future__ import annotations

import json
import random

import pytest

from agentrl_env_webshop import WebShopTask
from agentrl_env_webshop.catalog import GeneratedCatalog, convert_webshop_product, load_webshop_products
from agentrl_env_webshop.export import export
from agentrl_env_webshop.generator import PRICE_RANGE, asin_of, index_of_asin, make_goal, make_product, price_bound
from agentrl_env_webshop.samples import SPLITS, load_split
from agentrl_envs import TaskRuntime
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.errors import DataError


def test_products_are_a_pure_function_of_seed_and_index():
    fresh = make_product.__wrapped__
    assert fresh(0, 123) == fresh(0, 123) == make_product(0, 123)
    assert fresh(1, 123) != fresh(0, 123)
    assert GeneratedCatalog(0, 1000).product(7) == GeneratedCatalog(0, 1_000_000).product(7)


def test_asins_are_unique_and_invertible():
    asins = [asin_of(0, i) for i in range(0, 2_000_000, 37)]
    assert len(set(asins)) == len(asins)
    assert all(a.startswith("B0") and len(a) == 10 for a in asins)
    assert [index_of_asin(0, a) for a in asins[:500]] == list(range(0, 500 * 37, 37))
    assert GeneratedCatalog(0, 1000).index_of(asin_of(0, 5000)) is None  # outside this catalog
    assert index_of_asin(0, "not-an-asin") is None


def test_catalog_is_varied():
    products = [make_product(0, i) for i in range(2000)]
    assert {p["category"] for p in products} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert len({p["query"] for p in products}) >= 35
    assert len({a for p in products for a in p["Attributes"]}) >= 150
    assert len({v for p in products for vs in p["options"].values() for v in vs}) >= 150
    prices = [p["price"] for p in products]
    assert min(prices) < 10 and max(prices) > 300
    assert len({p["Title"] for p in products}) == len(products)


def test_goals_are_satisfiable_by_their_target():
    for split, (targets, variants) in SPLITS.items():
        goals = load_split(split)
        assert len(goals) == len(targets) * variants
        for g in goals[:: max(1, len(goals) // 50)]:
            p = make_product(0, index_of_asin(0, g["asin"]))
            assert set(g["attributes"]) <= set(p["Attributes"]) and g["attributes"]
            assert len(g["goal_options"]) == len(p["options"])
            assert all(v in vs for v, vs in zip(g["goal_options"], p["options"].values(), strict=True))
            assert p["price"] <= g["price_upper"]
            if g["price_upper"] < 1_000_000:
                assert g["instruction_text"].endswith(f", and price lower than {g['price_upper']:.2f} dollars")
    splits = {s: {g["asin"] for g in load_split(s)} for s in SPLITS}
    assert not splits["dev"] & splits["train"] and not splits["dev"] & splits["test"] and not splits["train"] & splits["test"]


def test_price_bound_is_webshop_s_draw():
    rng = random.Random(1)
    for price in (0.5, 23.99, 975.0, 985.0):
        upper, text = price_bound(price, rng)
        above = [p for p in PRICE_RANGE if p > price][:4]
        if len(above) < 2:
            assert (upper, text) == (1_000_000.0, "")
        else:
            assert upper in above[1:] and upper > price and text == f", and price lower than {upper:.2f} dollars"


def test_webshop_product_conversion():
    raw = {
        "asin": "B0AAAAAAAA",
        "category": "fashion",
        "query": " Men's Shirts ",
        "name": "A Shirt",
        "product_category": "Clothing › Men",
        "full_description": "desc",
        "pricing": "$10.00$20.00",
        "small_description": "one bullet",
        "customization_options": {"Color": [{"value": "Navy/White ", "image": None}], "Size": None},
    }
    p = convert_webshop_product(raw, {}, random.Random(0))
    assert p["pricing"] == [10.0, 20.0] and p["Price"] == "$10.0 to $20.0" and 10 <= p["price"] <= 20
    assert p["options"] == {"color": ["navy | white"]}
    assert p["BulletPoints"] == ["one bullet"] and p["Attributes"] == ["DUMMY_ATTR"] and p["query"] == "men's shirts"
    single = convert_webshop_product({**raw, "pricing": "$7.5"}, {"B0AAAAAAAA": {"attributes": ["x"]}}, random.Random(0))
    assert (single["pricing"], single["Price"], single["price"], single["Attributes"]) == ([7.5], "$7.5", 7.5, ["x"])
    assert convert_webshop_product({**raw, "pricing": ""}, {}, random.Random(0))["Price"] == "$100.0"


async def test_webshop_files_load_and_play(tmp_path, index_dir):
    data = tmp_path / "webshop-data"
    export(seed=3, products=1200, goals=8, out=data)
    items = json.loads((data / "items_shuffle.json").read_text())
    items.append(dict(items[0]))  # a duplicate ASIN: skipped, as WebShop does
    (data / "items_shuffle.json").write_text(json.dumps(items))
    assert len(load_webshop_products(data)) == 1200

    runtime = TaskRuntime(WebShopTask, data=str(data), config={"products": 1000, "index_dir": index_dir})
    assert len(runtime.samples) == 8 and all(s["catalog_dir"] == str(data.resolve()) for s in runtime.samples)
    await runtime.open()
    sessions = InProcessSessions(runtime)
    for i, sample in enumerate(runtime.samples):
        t = await run_episode(sessions, "webshop", i, WebShopTask.reference_policy(sample))
        assert t.solved and t.reward == 1.0, t.messages[-1]
    await runtime.close()


def test_bad_data_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="items_human_ins.json"):
        WebShopTask.load_samples(data=tmp_path)
    bad = tmp_path / "goals.json"
    bad.write_text(json.dumps([{"asin": "B0AAAAAAAA"}]))
    with pytest.raises(DataError, match="lacks"):
        WebShopTask.load_samples(data=bad)
    good = tmp_path / "goals.jsonl"
    good.write_text(json.dumps(make_goal(0, 1)) + "\n")
    assert WebShopTask.load_samples(data=good) == [make_goal(0, 1)]
