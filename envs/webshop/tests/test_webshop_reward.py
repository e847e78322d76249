"""WebShop's reward on hand-computed cases (agentrl_env_webshop.reward, pure functions)."""

from __future__ import annotations

import pytest

from agentrl_env_webshop.nouns import lexical_noun_tokens
from agentrl_env_webshop.reward import attribute_matches, normalize_color, option_matches, reward, type_reward

LIPSTICK_PATH = "Beauty & Personal Care › Makeup › Lips › Lipstick"


def product(**over):
    p = {
        "asin": "B0TEST0001",
        "name": "Velora Premium Long Lasting Lipstick AB-123, Cruelty Free",
        "Title": "Velora Premium Long Lasting Lipstick AB-123, Cruelty Free",
        "query": "lipstick",
        "product_category": LIPSTICK_PATH,
        "Attributes": ["long lasting", "cruelty free"],
        "BulletPoints": ["WATERPROOF: stays on all day."],
        "Description": "A lipstick with a matte finish.",
    }
    p.update(over)
    return p


def goal(**over):
    g = {
        "name": product()["name"],
        "query": "lipstick",
        "product_category": LIPSTICK_PATH,
        "attributes": ["long lasting", "waterproof", "paraben free"],
        "goal_options": ["ruby red", "pack of 2"],
        "price_upper": 20.0,
    }
    g.update(over)
    return g


def test_partial_attributes_partial_options_and_price_over_the_bound():
    # attributes: "long lasting" (fuzzy, in Attributes), "waterproof" (substring of the bullet
    # points), not "paraben free" -> 2 of 3; options: "ruby red" and the chosen "red" both
    # normalize to "red" -> 1 of 2; price 25 > 20 -> 0. (2 + 1 + 0) / (3 + 2 + 1) = 0.5, type 1.
    r = reward(product(), goal(), price=25.0, options={"color": "red"})
    assert (r.attribute_matches, r.option_matches, r.r_price) == (2, 1, False)
    assert r.r_type == 1.0
    assert r.reward == pytest.approx(0.5)
    assert (r.r_att, r.r_option) == (pytest.approx(2 / 3), 0.5)
    assert (r.w_att, r.w_option, r.w_price) == (pytest.approx(3 / 6), pytest.approx(2 / 6), pytest.approx(1 / 6))
    metrics = r.metrics()
    assert "reward" not in metrics and metrics["r_type"] == 1.0 and metrics["option_matches"] == 1


def test_everything_matched_at_the_bound_scores_one():
    g = goal(attributes=["long lasting", "cruelty free"], goal_options=["ruby red"])
    r = reward(product(), g, price=20.0, options={"color": "ruby red"})  # price == bound is within it
    assert r.reward == 1.0 and r.r_price is True


def test_wrong_product_type_zeroes_the_reward():
    sofa = product(
        name="Arix Sectional Sofa",
        Title="Arix Sectional Sofa",
        query="sofa",
        product_category="Home & Kitchen › Furniture › Living Room Furniture › Sofas & Couches",
        Attributes=["long lasting"],
    )
    r = reward(sofa, goal(), price=10.0, options={})
    # nouns: wanted {velora, lipstick, ab, cruelty}... none in {arix, sofa} -> title_score 0 -> r_type 0
    assert r.title_score == 0.0 and r.r_type == 0.0 and r.reward == 0.0
    assert not r.query_match and not r.category_match


@pytest.mark.parametrize(
    ("bought", "wanted", "query_match", "shared_levels", "expected"),
    [
        # title_score = |bought ∩ wanted| / |wanted|
        ({"a"}, ["b", "c"], True, 3, 0.0),  # 0 shared nouns: 0 whatever else matches
        ({"a"}, ["a"] + [f"x{i}" for i in range(19)], True, 3, 0.1),  # 1/20 = 0.05 < 0.1
        ({"a"}, ["a", "b", "c", "d", "e"], False, 1, 0.5),  # 0.2 is not > 0.2; no query/category match
        ({"a"}, ["a", "b", "c", "d", "e"], False, 2, 1.0),  # 2 shared category levels suffice
        ({"a"}, ["a", "b", "c", "d", "e"], True, 0, 1.0),  # equal queries suffice
        ({"a", "b"}, ["a", "b", "c", "d", "e"], False, 0, 1.0),  # 0.4 > 0.2
        (set(), [], False, 0, 0.5),  # no goal nouns: title_score 0.2
    ],
)
def test_type_factor_thresholds(bought, wanted, query_match, shared_levels, expected):
    levels = ["L1", "L2", "L3"]
    p = product(name="bought", query="q", product_category=" › ".join(levels[:shared_levels] + ["P"]))
    g = goal(name="wanted", query="q" if query_match else "other", product_category=" › ".join(levels + ["G"]))
    nouns = {"bought": sorted(bought), "wanted": wanted}.__getitem__
    assert type_reward(p, g, nouns).r_type == expected


def test_category_match_needs_two_shared_levels():
    p = product(product_category="Beauty & Personal Care › Makeup › Eyes")
    g = goal(product_category="Beauty & Personal Care › Skin Care › Face")
    assert not type_reward(p, g, lambda name: ["x"]).category_match
    g2 = goal(product_category="Beauty & Personal Care › Makeup › Lips")
    assert type_reward(p, g2, lambda name: ["x"]).category_match


def test_attribute_matching_is_fuzzy_then_substring():
    p = product()
    assert attribute_matches(p, ["long-lasting"]) == 1  # punctuation ignored by token_set_ratio
    assert attribute_matches(p, ["matte finish"]) == 1  # in the description only
    assert attribute_matches(p, ["paraben free"]) == 0  # shares only "free" with "cruelty free"
    assert attribute_matches(p, ["Matte Finish"]) == 0  # the substring test is on lowercased text, case-sensitive goal


def test_option_matching_normalizes_colors_and_uses_token_sets():
    assert normalize_color("navy blue") == "blue"  # "blue" comes before "navy" in COLOR_SET
    assert normalize_color("14 inch") == "14 inch"
    assert option_matches(["blue"], ["navy blue"]) == 1
    assert option_matches(["large"], ["x-large"]) == 1  # token set: {"large"} ⊂ {"x", "large"} -> 100
    assert option_matches(["small"], ["x-large"]) == 0
    assert option_matches(["black", "large"], ["white", "large", "pack of 2"]) == 1


def test_dict_goal_options_count_their_values():
    r = reward(product(), goal(goal_options={"color": "ruby red"}), price=1.0, options={"color": "ruby red"})
    assert r.option_matches == 1 and r.w_option == pytest.approx(1 / 5)


def test_lexical_tagger_keeps_nouns_and_drops_adjectives_numbers_and_function_words():
    assert lexical_noun_tokens("Velora Premium Long Lasting Lipstick AB-123, for the Women") == [
        "velora",
        "lasting",
        "lipstick",
        "ab",
        "women",
    ]


def test_options_are_counted_per_goal_option_as_webshop_does():
    # WebShop's get_option_reward loops over the goal's options and counts one that any chosen
    # option matches: one chosen "red" matches both "ruby red" and "red" (both normalize to
    # "red"), so 2 of 2; "dark red" normalizes to "dark" ("dark" precedes "red" in COLOR_SET).
    assert option_matches(["red"], ["ruby red", "red"]) == 2
    assert option_matches(["red"], ["dark red"]) == 0
    r = reward(product(), goal(goal_options=["ruby red", "red"]), price=30.0, options={"color": "red"})
    # attributes 2 of 3, options 2 of 2, price 30 > 20: (2 + 2 + 0) / 6, type 1
    assert (r.attribute_matches, r.option_matches, r.r_price, r.r_option) == (2, 2, False, 1.0)
    assert r.reward == pytest.approx(4 / 6)
    # no goal options: r_option is None (WebShop leaves it out of its info), the total has 1 part fewer
    r = reward(product(), goal(goal_options=[]), price=5.0, options={"size": "large"})
    assert r.r_option is None and r.option_matches == 0 and r.reward == pytest.approx((2 + 0 + 1) / 4)
