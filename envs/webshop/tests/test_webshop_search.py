"""The search index: built once per catalog and reused, Lucene-like analysis, no query syntax."""

from __future__ import annotations

from agentrl_env_webshop.catalog import GeneratedCatalog
from agentrl_env_webshop.generator import make_goal
from agentrl_env_webshop.search import INDEX_VERSION, SearchIndex


def test_index_is_built_once_and_reused(tmp_path):
    catalog = GeneratedCatalog(0, 1000)
    first = SearchIndex.open_or_build(catalog, tmp_path)
    assert first.path == tmp_path / f"{catalog.key}-index-v{INDEX_VERSION}" and first.num_docs == 1000
    stamp = {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()}
    again = SearchIndex.open_or_build(catalog, tmp_path)
    assert {p.name: p.stat().st_mtime_ns for p in again.path.iterdir()} == stamp  # nothing rewritten
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name]  # no scratch left behind


def test_stop_words_stemming_and_no_query_syntax(small_catalog):
    _, index = small_catalog
    assert index.search("the and of with") == []  # Lucene's English stop words only
    assert index.search("") == [] and index.search("  ,;  ") == []
    goal = make_goal(0, 230)
    exact = index.search(goal["name"])
    assert exact[0] == 230 and len(exact) == 50
    # query syntax is plain text: quotes, colons, parentheses and AND/OR change nothing
    noisy = f'"{goal["name"]}" AND (title:' + ")"
    assert index.search(noisy)[0] == 230
    # stemming: plural and singular find the same documents
    assert index.search("lipsticks") == index.search("lipstick") != []
