"""Scoring of DB answers: AgentBench's ``compare_results`` / ``_clean_answer`` semantics, as pure functions.

A committed answer (or a gold label, or a raw result string such as ``"[('abc',)]"``) is first
*cleaned* into a list of strings (:func:`clean_answer`), then compared (:func:`compare_results`):

* mutations (INSERT / UPDATE / DELETE): the cleaned lists must be equal (the answer is the table
  hash, the gold is ``answer_md5``);
* everything else (SELECT-type): one value each → equal, or both numbers within 1e-2; several
  values that are all numbers → a one-to-one match within 1e-2; otherwise equal as *sets*.

Cleaning maps ``None``/``null``/``nan``/``inf``/``""`` (any case) to ``"0"``, strips a trailing
``%`` and thousands commas, strips quotes and whitespace, and unwraps one-element tuples.
Where AgentBench calls ``eval`` on text the model wrote, this module calls
:func:`ast.literal_eval`: the same result for every literal, and no code execution.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

MUTATION_TYPES = ("INSERT", "DELETE", "UPDATE")
FLOAT_TOLERANCE = 1e-2

_SPECIAL_VALUES = frozenset({"none", "null", "undefined", "nan", "inf", "infinity", "-inf", "-infinity", ""})
_QUOTES = "'\""


def is_mutation(query_type: str) -> bool:
    """True for the types scored by table hash rather than by answer."""
    return query_type in MUTATION_TYPES


def normalize_value(value: Any) -> str:
    """One value → its canonical string (AgentBench's ``_normalize_special_values``)."""
    if value is None:
        return "0"
    text = str(value).strip()
    # A percentage returns at once: "1,5%" keeps its comma, as in AgentBench.
    if text.endswith("%"):
        return text[:-1].strip()
    if "," in text and not text.startswith("[") and not text.endswith("]"):
        text = text.replace(",", "")
    return "0" if text.lower() in _SPECIAL_VALUES else text


def _literal(text: str) -> Any:
    """``ast.literal_eval`` that reports failure as ``None`` plus a flag."""
    try:
        return True, ast.literal_eval(text)
    except Exception:  # any parse failure means "not a literal": fall back to text handling
        return False, None


def _strip_item(item: Any) -> str:
    if isinstance(item, tuple) and len(item) == 1:
        item = item[0]
    return str(item).strip().strip(_QUOTES)


def _clean_result_rows(answer: Any) -> list[str] | None:
    """A raw result string ``"[(v,), ...]"`` → its single-column values; ``None`` if it is not one.

    Rows with more than one column are dropped, as AgentBench does."""
    if not (isinstance(answer, str) and answer.startswith("[") and answer.endswith("]")):
        return None
    ok, parsed = _literal(answer)
    if ok and isinstance(parsed, list) and all(isinstance(row, tuple) for row in parsed):
        return [str(row[0]).strip().strip(_QUOTES) for row in parsed if len(row) == 1]
    inner = answer.strip("[]")
    if inner.count("(") == 1 and inner.startswith("(") and inner.endswith(",)"):
        return [inner[1:-2].strip().strip(_QUOTES)]
    return None


def _split_bracketed(text: str) -> list[str]:
    """Split ``"[a, 'b,c', d]"`` on commas outside quotes (AgentBench's fallback parser)."""
    items: list[str] = []
    current = ""
    in_quotes = False
    for char in text[1:-1]:
        if char in _QUOTES:
            in_quotes = not in_quotes
        elif char == "," and not in_quotes:
            if current:
                items.append(normalize_value(current.strip().strip(_QUOTES)))
                current = ""
        else:
            current += char
    if current:
        items.append(normalize_value(current.strip().strip(_QUOTES)))
    return items


def clean_answer(answer: Any) -> list[str] | None:
    """An answer, label or raw result → a list of canonical strings (AgentBench's ``_clean_answer``).

    Returns ``None`` only where AgentBench does (a bracketed string that parses to a non-list)."""
    if answer is None:
        return ["0"]
    rows = _clean_result_rows(answer)
    if rows is not None:
        return [normalize_value(v) for v in rows]
    if isinstance(answer, str):
        answer = answer.strip()
        if answer.startswith("[") and answer.endswith("]"):
            ok, parsed = _literal(answer)
            if not ok:
                return _split_bracketed(answer)
            if isinstance(parsed, list):
                return [normalize_value(_strip_item(item)) for item in parsed]
            return None
        return [normalize_value(answer.strip(_QUOTES))]
    if isinstance(answer, (list, tuple)):
        return [normalize_value(_strip_item(item)) for item in answer]
    return [normalize_value(str(answer).strip().strip(_QUOTES))]


def is_float(value: Any) -> bool:
    """True when Python's ``float()`` accepts ``value`` (so "nan", "1_000" and " 2 " count)."""
    try:
        float(value)
    except (ValueError, TypeError):
        return False
    return True


def float_equal(a: Any, b: Any, tol: float = FLOAT_TOLERANCE) -> bool:
    try:
        return abs(float(a) - float(b)) <= tol
    except (ValueError, TypeError):
        return False


def _match_numbers(answer: Sequence[str], gold: Sequence[str]) -> bool:
    """Greedy one-to-one matching of numbers within the tolerance (AgentBench's order)."""
    if len(answer) != len(gold):
        return False
    used = [False] * len(gold)
    for a in answer:
        for i, g in enumerate(gold):
            if not used[i] and float_equal(a, g):
                used[i] = True
                break
        else:
            return False
    return all(used)


def compare_results(answer: Any, ground_truth: Any, query_type: str) -> bool:
    """Whether ``answer`` matches ``ground_truth`` for a sample of type ``query_type``.

    Never raises: anything that cannot be compared is a mismatch (as in AgentBench)."""
    try:
        got = clean_answer(answer)
        want = clean_answer(ground_truth)
        if is_mutation(query_type):
            return got == want
        if got is None or want is None:
            return False
        if len(got) == 1 and len(want) == 1:
            a, g = got[0], want[0]
            if a == "0" and g == "0":
                return True
            if is_float(a) and is_float(g):
                return float_equal(a, g)
            return a == g
        if all(is_float(x) for x in got) and all(is_float(x) for x in want):
            return _match_numbers(got, want)
        return set(got) == set(want)
    except Exception:
        return False


def hash_from_result(result: str) -> str:
    """The hash value inside a raw hash-query result (``"[('abc…',)]"`` → ``"abc…"``).

    Reproduces AgentBench's string handling: an empty table (``[(None,)]``) gives ``"None"``, an
    error message gives a fragment of it — neither matches a real hash."""
    return result.strip("[]()").split(",")[0].strip().strip("'")


def combine_table_hashes(hashes: Sequence[str]) -> str:
    """Several tables' hashes → one value: sorted, joined with ``_``."""
    return "_".join(sorted(hashes))
