"""The shop's pages, transitions and text observations (agentrl_env_webshop.shop)."""

from __future__ import annotations

import pytest

from agentrl_env_webshop.generator import make_goal
from agentrl_env_webshop.shop import InvalidAction, ShopSession

GOAL = make_goal(0, 210)


@pytest.fixture
def shop(small_catalog):
    catalog, index = small_catalog
    return ShopSession(catalog, index, GOAL["instruction_text"])


def test_opening_page_is_webshop_search_page(shop):
    page = shop.page()
    assert page.text == f"WebShop [SEP] Instruction: [SEP] {GOAL['instruction_text']} [SEP] Search"
    assert page.available_actions() == "{'has_search_bar': True, 'clickables': ['search']}"


def test_search_shows_ten_of_fifty_results_with_paging(shop):
    page = shop.search(GOAL["name"])
    assert not page.has_search_bar
    assert page.text.startswith(
        f"Instruction: [SEP] {GOAL['instruction_text']} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] "
    )
    assert page.clickables[:2] == ["back to search", "next >"]
    asins = page.clickables[2:]
    assert len(asins) == 10 and asins[0] == GOAL["asin"].lower()  # the exact title ranks first
    first = shop.catalog.product(shop.results[0])
    assert f"{first['asin']} [SEP] {first['Title']} [SEP] {first['Price']}" in page.text

    page2 = shop.click("Next >")  # clicks are case-insensitive, as WebShop lowercases them
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in page2.text
    assert page2.clickables[:3] == ["back to search", "< prev", "next >"]
    assert set(page2.clickables[3:]).isdisjoint(asins)
    assert shop.click("< prev").clickables == page.clickables


def test_item_page_options_sub_pages_and_back(shop):
    shop.search(GOAL["name"])
    item = shop.click(GOAL["asin"].lower())
    product = shop.catalog.product(shop.product_index)
    assert product["asin"] == GOAL["asin"]
    values = [v for vs in product["options"].values() for v in vs]
    assert item.clickables == ["back to search", "< prev", "description", "features", "reviews", "buy now", *values]
    assert item.text.endswith(
        f"{product['Title']} [SEP] Price: {product['Price']} [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    name, option_values = next(iter(product["options"].items()))
    assert f"< Prev [SEP] {name} [SEP] {' [SEP] '.join(option_values)}" in item.text

    shop.click(option_values[-1])
    assert shop.options == {name: option_values[-1]}
    desc = shop.click("description")
    assert desc.text.endswith(f"< Prev [SEP] {product['Description']}")
    assert desc.clickables == ["back to search", "< prev"]
    feats = shop.click("< prev") and shop.click("features")
    assert feats.text.endswith(" [SEP] ".join(product["BulletPoints"]))
    assert shop.click("< prev").clickables == item.clickables
    assert shop.options == {name: option_values[-1]}  # kept across sub pages

    results = shop.click("< prev")
    assert results.text.startswith(f"Instruction: [SEP] {GOAL['instruction_text']} [SEP] Back to Search [SEP] Page 1")
    assert shop.options == {}  # back on the results, the choice is gone (WebShop's search_results)


def test_clicking_something_not_on_the_page_changes_nothing(shop):
    before = shop.page()
    with pytest.raises(InvalidAction, match="search_action"):
        shop.click("search")
    shop.search(GOAL["name"])
    results = shop.page()
    with pytest.raises(InvalidAction, match='"buy now" is not a clickable value on this page'):
        shop.click("buy now")
    assert shop.page() == results != before
    with pytest.raises(InvalidAction, match="empty"):
        shop.search("   ")


def test_back_to_search_resets_and_search_works_from_any_page(shop):
    shop.search(GOAL["name"])
    shop.click(GOAL["asin"])
    page = shop.search("black running shoes")  # WebShop accepts a search on any page
    assert page.text.split(" [SEP] ")[3].startswith("Page 1")
    page = shop.click("back to search")
    assert page.has_search_bar and shop.keywords == [] and shop.product_index is None


def test_buy_now_records_the_purchase_and_ends_the_shop(shop):
    shop.search(GOAL["name"])
    shop.click(GOAL["asin"])
    for value in GOAL["goal_options"]:
        shop.click(value)
    done = shop.click("buy now")
    assert shop.purchase is not None and shop.purchase.product["asin"] == GOAL["asin"]
    assert sorted(shop.purchase.options.values()) == sorted(GOAL["goal_options"])
    assert done.text.startswith("Thank you for shopping with us! [SEP] Your code: [SEP] None")
    assert done.clickables == []
    with pytest.raises(InvalidAction):
        shop.search("more")
