"""AgentBench's answer comparison on hand-made values."""

from __future__ import annotations

import pytest
from agentrl_env_db.scoring import clean_answer, combine_table_hashes, compare_results, hash_from_result, normalize_value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "0"),
        ("None", "0"),
        ("NULL", "0"),
        ("nan", "0"),
        ("-Infinity", "0"),
        ("", "0"),
        ("  12% ", "12"),
        ("1,5%", "1,5"),  # a percentage returns before commas are stripped
        ("1,234,567", "1234567"),
        ("[1,2]", "[1,2]"),  # bracketed text keeps its commas
        ("Abc", "Abc"),  # case is kept
        (3.0, "3.0"),
    ],
)
def test_normalize_value(value: object, expected: str) -> None:
    assert normalize_value(value) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, ["0"]),
        ("[('abc',)]", ["abc"]),
        ("[(293.0,)]", ["293.0"]),
        ("[(None,)]", ["0"]),
        ("[('a',), ('b', 'c'), ('d',)]", ["a", "d"]),  # multi-column rows are dropped
        ("[]", []),
        ("'quoted'", ["quoted"]),
        ("[1, 'x', None]", ["1", "x", "0"]),
        ("[a, 'b,c', d]", ["a", "bc", "d"]),  # not a literal: quote-aware split, then commas stripped
        (["1,000", " 'x' ", ("y",)], ["1000", "x", "y"]),
        (42, ["42"]),
    ],
)
def test_clean_answer(answer: object, expected: list[str]) -> None:
    assert clean_answer(answer) == expected


def test_clean_answer_does_not_evaluate_code() -> None:
    # AgentBench eval()s this; here it is only text.
    assert clean_answer("[__import__('os').getpid()]") == ["__import__(os).getpid()"]


@pytest.mark.parametrize(
    ("answer", "label", "correct"),
    [
        (["March 19, 1998"], ["March 19, 1998"], True),
        (["march 19, 1998"], ["March 19, 1998"], False),  # case matters
        (["2011"], ["2011.0"], True),
        (["2011.009"], ["2011.0"], True),  # within 1e-2
        (["2011.02"], ["2011.0"], False),
        (["None"], ["none"], True),
        (["null"], ["0"], True),
        ([], ["none"], False),
        (["50%"], ["50"], True),
        (["21,000"], ["21000.0"], True),
        (["K228EE", "K255AZ"], ["K255AZ", "K228EE"], True),  # set match
        (["K255AZ", "K255AZ", "K228EE"], ["K255AZ", "K228EE"], True),  # sets ignore repeats
        (["K255AZ"], ["K255AZ", "K228EE"], False),
        (["1.001", "2"], ["2.0", "1.0"], True),  # numbers: one-to-one within 1e-2
        (["1", "1"], ["1", "2"], False),
        (["1", "2", "3"], ["1", "2"], False),
        (["[('Giza',)]"], ["Giza"], False),  # a list item is not unwrapped as a raw result
    ],
)
def test_compare_select(answer: list[str], label: list[str], correct: bool) -> None:
    assert compare_results(answer, label, "other") is correct


def test_compare_mutation_uses_exact_hash() -> None:
    gold = "[('09aa8fbf72f39362970f95a1276b957c',)]"
    assert compare_results("09aa8fbf72f39362970f95a1276b957c", gold, "INSERT")
    assert not compare_results("09aa8fbf72f39362970f95a1276b957d", gold, "UPDATE")
    assert compare_results("None", "[(None,)]", "DELETE")  # empty table on both sides


def test_hash_from_result_follows_agentbench_string_handling() -> None:
    assert hash_from_result("[('abc',)]") == "abc"
    assert hash_from_result("[(None,)]") == "None"
    assert hash_from_result("1146: Table 'x.t' doesn't exist") == "1146: Table 'x.t' doesn't exist"
    assert combine_table_hashes(["b", "a"]) == "a_b"
