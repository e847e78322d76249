"""Generate the ``easy``, ``easy-test`` and ``easy-val`` splits of the DB task (deterministic).

    python -m agentrl_env_db.make_easy          # writes data/easy.jsonl, data/easy-test.jsonl, data/easy-val.jsonl

Real DB samples (AgentBench's format, the task's tools and scoring) with one small table
(3 columns): a SELECT-type lookup in a one-row table that the question prints (4/5; commit the
asked cell with ``commit_final_answer``, or query first), or, in a three-row table, an
INSERT/DELETE/UPDATE whose SQL statement is spelled out (1/5; ``execute_sql`` with it, then
``commit_final_answer``; scored by the table hash against the gold SQL ``label[0]`` run on a
scratch database). SmolLM2-135M-Instruct under the trainer's tool-call grammar solves about
a third (18/48 of the first ``easy-test`` samples at temperature 0.7;
``benchmarks/base_rate.py``). The samples carry ``"prompt": "easy"`` (a short system prompt and
worked examples, :func:`.prompts.opening_messages`) and ``"max_turns": 3``.

``easy`` (train, 200 samples), ``easy-test`` (held out, 100: reported figures only) and
``easy-val`` (held out, 100: choosing settings, e.g. the demo's learning rate) are drawn with
different seeds, in that order, and no two share a (table, question) pair. ``easy-val`` is drawn
last, so adding it left ``easy`` and ``easy-test`` byte for byte as they were.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

TRAIN_SIZE = 200
TEST_SIZE = 100
VAL_SIZE = 100
MAX_TURNS = 3

#: table name -> (columns, value pools per column)
THEMES: dict[str, tuple[list[str], list[list[str]]]] = {
    "pets": (
        ["name", "species", "age"],
        [
            ["Rex", "Bella", "Max", "Luna", "Coco", "Milo", "Daisy", "Oscar"],
            ["dog", "cat", "rabbit", "parrot", "hamster"],
            [str(i) for i in range(1, 15)],
        ],
    ),
    "books": (
        ["title", "author", "year"],
        [
            ["Dune", "Emma", "Ulysses", "Hamlet", "Beloved", "Rebecca", "Matilda", "Walden"],
            ["Smith", "Brown", "Lee", "Garcia", "Khan", "Novak"],
            [str(y) for y in range(1950, 2021, 5)],
        ],
    ),
    "cities": (
        ["city", "country", "population"],
        [
            ["Lyon", "Porto", "Turin", "Graz", "Ghent", "Malmo", "Bergen", "Brno"],
            ["France", "Portugal", "Italy", "Austria", "Belgium", "Sweden"],
            [str(p) for p in range(100, 1000, 50)],
        ],
    ),
    "employees": (
        ["name", "department", "salary"],
        [
            ["Alice", "Bob", "Carol", "David", "Erin", "Frank", "Grace", "Henry"],
            ["sales", "finance", "support", "design", "legal"],
            [str(s) for s in range(3000, 9001, 500)],
        ],
    ),
    "products": (
        ["product", "category", "price"],
        [
            ["lamp", "chair", "desk", "mug", "kettle", "pillow", "clock", "mirror"],
            ["kitchen", "office", "bedroom", "garden"],
            [str(p) for p in range(5, 100, 5)],
        ],
    ),
}


def _q(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sample(rng: random.Random) -> dict[str, Any]:
    table = rng.choice(sorted(THEMES))
    columns, pools = THEMES[table]
    keys = rng.sample(pools[0], 4)  # 3 rows + one new key for INSERT
    rows = [[k, rng.choice(pools[1]), rng.choice(pools[2])] for k in keys[:3]]
    kind = rng.choice(["SELECT", "SELECT", "SELECT", "SELECT", rng.choice(["INSERT", "DELETE", "UPDATE"])])
    if kind == "SELECT":  # a lookup in a one-row table
        row = rows[0]
        col = rng.choice([1, 2])
        shown = ", ".join(f"{c} = {v}" for c, v in zip(columns, row, strict=True))
        sql = f"SELECT {columns[col]} FROM {table} WHERE {columns[0]} = {_q(row[0])}"
        description = (
            f"The {table} table has one row: {shown}. What is the {columns[col]} of {row[0]}? "
            "Commit the answer with commit_final_answer."
        )
        return _sample_dict(description, kind, table, columns, [row], [row[col]], sql)
    if kind == "INSERT":
        new = [keys[3], rng.choice(pools[1]), rng.choice(pools[2])]
        description = f"Insert a new row into the {table} table with {columns[0]} {_q(new[0])}, {columns[1]} {_q(new[1])} and {columns[2]} {_q(new[2])}."
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(_q(v) for v in new)})"
    elif kind == "DELETE":
        row = rng.choice(rows)
        description = f"Delete the row of the {table} table whose {columns[0]} is {_q(row[0])}."
        sql = f"DELETE FROM {table} WHERE {columns[0]} = {_q(row[0])}"
    else:
        row = rng.choice(rows)
        col = rng.choice([1, 2])
        value = rng.choice([v for v in pools[col] if v != row[col]])
        description = (
            f"In the {table} table, set the {columns[col]} of the row whose {columns[0]} is {_q(row[0])} to {_q(value)}."
        )
        sql = f"UPDATE {table} SET {columns[col]} = {_q(value)} WHERE {columns[0]} = {_q(row[0])}"
    description = f'{description} To do it, call execute_sql with the query "{sql}", then call commit_final_answer.'
    return _sample_dict(description, kind, table, columns, rows, [sql], None)


def _sample_dict(
    description: str, kind: str, table: str, columns: list[str], rows: list[list[str]], label: list[str], select_sql: str | None
) -> dict[str, Any]:
    sample: dict[str, Any] = {
        "description": description,
        "type": [kind],
        "table": {
            "table_name": table,
            "table_info": {"columns": [{"name": c, "type": "TEXT"} for c in columns], "rows": rows},
        },
        "label": label,
        "prompt": "easy",
        "max_turns": MAX_TURNS,
    }
    if select_sql is not None:
        sample["sql"] = {"query": select_sql}
    return sample


def _key(sample: dict[str, Any]) -> str:
    return json.dumps([sample["description"], sample["table"]], sort_keys=True)


def make_splits() -> dict[str, list[dict[str, Any]]]:
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for split, size, seed in (("easy", TRAIN_SIZE, 20251), ("easy-test", TEST_SIZE, 20252), ("easy-val", VAL_SIZE, 20253)):
        rng = random.Random(seed)
        samples: list[dict[str, Any]] = []
        while len(samples) < size:
            s = _sample(rng)
            if _key(s) not in seen:
                seen.add(_key(s))
                samples.append(s)
        out[split] = samples
    return out


def main() -> None:
    data = Path(__file__).parent / "data"
    for split, samples in make_splits().items():
        path = data / f"{split}.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
        print(f"wrote {len(samples)} samples to {path}")


if __name__ == "__main__":
    main()
