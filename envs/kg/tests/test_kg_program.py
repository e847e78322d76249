"""Programs compile to SPARQL whose answers are the generator's: every shipped question's
S-expression, run on the embedded store, gives exactly its gold answer."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from agentrl_env_kg import generate as G
from agentrl_env_kg.program import (
    Arg,
    Entity,
    Join,
    ProgramError,
    check_name,
    parse_s_expression,
    predicates_query,
    select_query,
)
from agentrl_env_kg.task import default_store


def _questions(split):
    return json.loads(resources.files("agentrl_env_kg").joinpath("data", f"{split}.json").read_text())


@pytest.mark.parametrize("split", ["dev", "test"])
def test_every_s_expression_answers_its_gold(split):
    store = default_store()
    wrong = []
    for item in _questions(split):
        program = parse_s_expression(item["s_expression"])
        assert program.lisp() == item["s_expression"]
        got = set(store.select_sync(select_query(program)))
        gold = {a["answer_argument"] for a in item["answer"]}
        if got != gold:
            wrong.append((item["qid"], sorted(got)[:5], sorted(gold)[:5]))
    assert wrong == []


def test_a_superlative_nested_in_a_join_is_a_sub_select():
    # the director of the longest film of the director of some film, computed in Python too
    graph, _ = G.build_graph(G.DEFAULT_SEED, 1.0)
    director = graph.by_type["film.director"][3]
    films = graph.out(director, "film.director.film")
    longest = max(films, key=lambda f: graph.attrs[f]["film.film.running_time"])
    program = Join("film.film.genre", Arg(Join("film.director.film", Entity(director)), "film.film.running_time", True))
    got = set(default_store().select_sync(select_query(program)))
    assert got == set(graph.out(longest, "film.film.genre"))


def test_predicates_of_an_entity_are_its_out_relations():
    graph, _ = G.build_graph(G.DEFAULT_SEED, 1.0)
    film = graph.by_type["film.film"][0]
    got = set(default_store().select_sync(predicates_query(Entity(film))))
    assert set(graph.edges[film]) | set(graph.attrs[film]) <= got
    assert "type.object.name" in got and "type.object.type" in got


@pytest.mark.parametrize(
    "text, why",
    [
        ("(AND a.b (JOIN (R c.d) m.0x)", "unbalanced"),
        ("(JOIN (R a.b c.d) m.0x)", "JOIN expects a relation or (R relation)"),
        ("(UNION a.b c.d)", "unsupported"),
        ("(AND a.b m.0x) extra", "trailing"),
    ],
)
def test_bad_s_expressions_are_explained(text, why):
    with pytest.raises(ProgramError, match=re.escape(why)):
        parse_s_expression(text)


def test_names_cannot_inject_sparql():
    with pytest.raises(ProgramError):
        check_name("film.film> } ; DROP ALL ; {")
    with pytest.raises(ProgramError):
        select_query(Join("a.b> ?x", Entity("m.0abc")))


def test_a_forward_join_is_the_reverse_join_through_the_reverse_property():
    # GrailQA (and AgentBench's files) write (JOIN r x) as well as (JOIN (R r) x): the subjects
    # whose r points at x, the same set as the objects of r's reverse property from x.
    graph, _ = G.build_graph(G.DEFAULT_SEED, 1.0)
    director = graph.by_type["film.director"][0]
    forward = parse_s_expression(f"(AND film.film (JOIN film.film.directed_by {director}))")
    assert forward.lisp() == f"(AND film.film (JOIN film.film.directed_by {director}))"
    assert G.GENERATED.reverse["film.film.directed_by"] == "film.director.film"
    reverse = Join("film.director.film", Entity(director))
    store = default_store()
    got = set(store.select_sync(select_query(forward)))
    assert got and got == set(store.select_sync(select_query(reverse))) == set(graph.out(director, "film.director.film"))
    # nested: the other films of a film's directors, through a forward join on a set (a question's
    # own entities are never in its answer)
    film = sorted(got)[0]
    nested = parse_s_expression(f"(JOIN film.film.directed_by (JOIN (R film.film.directed_by) {film}))")
    others = {f for d in graph.out(film, "film.film.directed_by") for f in graph.out(d, "film.director.film")} - {film}
    assert set(store.select_sync(select_query(nested))) == others
