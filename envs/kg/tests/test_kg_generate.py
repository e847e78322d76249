"""The generator is deterministic by seed and the shipped splits are its output."""

from __future__ import annotations

import hashlib
import json
from importlib import resources

from agentrl_env_kg import generate as G
from agentrl_env_kg.ontology import load_ontology


def test_shipped_splits_are_the_generators_output_byte_for_byte():
    graph, _ = G.build_graph(G.DEFAULT_SEED, 1.0)
    made = G.make_questions(graph, G.DEFAULT_SEED)
    for split, items in made.items():
        shipped = resources.files("agentrl_env_kg").joinpath("data", f"{split}.json").read_text(encoding="utf-8")
        assert G.dump_split(items) == shipped, f"split {split} differs from the generator's output"


def test_same_seed_same_bytes_other_seed_other_graph(tmp_path):
    a = G.write(tmp_path / "a", seed=5, scale=0.6)
    b = G.write(tmp_path / "b", seed=5, scale=0.6)
    G.write(tmp_path / "c", seed=6, scale=0.6)
    assert a == b
    for name in ("graph.nt", "dev.json", "train.json", "test.json", "ontology/fb_roles", "ontology/vocab.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    digest = lambda d: hashlib.sha256((tmp_path / d / "graph.nt").read_bytes()).hexdigest()  # noqa: E731
    assert digest("a") != digest("c")
    assert a["triples"] == len((tmp_path / "a" / "graph.nt").read_text().splitlines())


def test_splits_share_no_question_and_dev_covers_every_kind():
    seen: dict[str, str] = {}
    for split in ("dev", "train", "test"):
        items = json.loads(resources.files("agentrl_env_kg").joinpath("data", f"{split}.json").read_text())
        assert len(items) == 6 * G.SPLIT_SIZES[split]
        for item in items:
            for key in (item["question"], item["s_expression"]):
                assert key not in seen, f"{key!r} is in {seen.get(key)} and {split}"
                seen[key] = split
        if split == "dev":
            assert {i["source"].split(":")[1] for i in items} == set(G.KINDS)


def test_graph_is_freebase_shaped():
    graph, order = G.build_graph(G.DEFAULT_SEED, 1.0)
    text = G.ntriples(graph, order)
    assert 5000 <= len(order) <= 20000 and graph.triples > 40000
    assert all(m.startswith("m.0") for m in order)
    # every relation with a reverse is stored both ways
    film = graph.by_type["film.film"][0]
    perf = graph.out(film, "film.film.starring")[0]
    assert graph.out(perf, "film.performance.film") == [film]
    assert perf not in graph.names  # a CVT has no name
    assert f'<{G.NS}type.object.name> "' in text and '"@en .' in text
    assert f"^^<{G.XSD}float>" in text and f"^^<{G.XSD}integer>" in text


def test_ontology_files_round_trip(tmp_path):
    G.GENERATED.write(tmp_path, G._DOMAINS)
    back = load_ontology(tmp_path)
    assert back.range_of == G.GENERATED.range_of
    assert back.relations == G.GENERATED.relations and back.attributes == G.GENERATED.attributes
    assert back.reverse == G.GENERATED.reverse
