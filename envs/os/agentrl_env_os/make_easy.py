"""Generate the ``easy`` and ``easy-test`` splits of the OS task (deterministic).

    python -m agentrl_env_os.make_easy          # writes data/easy/ and data/easy-test/ (problems.json)

Real OS problems (AgentBench's format, the task's tools, sandbox and judging) that a 135M model
solves about a third of the time (15/48 of the first ``easy-test`` problems at temperature 0.7
under the trainer's tool-call grammar; ``benchmarks/base_rate.py``): one small file-system
change in ``/root`` whose bash command is spelled out in the problem (create a file or a
directory, write a word into a file, delete a file), judged by a ``check`` script, plus problems
that ask for the word stored in a file (judged by ``match``). Two calls: ``bash_action``, then
``finish_action`` (or ``answer_action``). The problems carry ``"prompt": "easy"`` (a short
system prompt with two worked examples, :data:`.prompts.EASY_SYSTEM_PROMPT`, and the bare
problem as the user message) and ``"max_turns": 3``.

``easy`` (train, 200 problems) and ``easy-test`` (held out, 100) are drawn with different seeds
and share no description.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

TRAIN_SIZE = 200
TEST_SIZE = 100
MAX_TURNS = 3

STEMS = ["notes", "report", "todo", "backup", "data", "log", "draft", "list", "config", "summary", "plan", "index"]
EXTS = ["txt", "log", "md", "csv", "cfg"]
DIRS = ["projects", "archive", "tmp2", "docs", "photos", "music", "scripts", "build", "cache", "work", "old", "src"]
WORDS = ["apple", "river", "orange", "falcon", "silver", "garden", "rocket", "pepper", "window", "marble", "tiger", "candle"]


def _problem(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["touch", "mkdir", "write", "remove", "read"])
    f = f"/root/{rng.choice(STEMS)}.{rng.choice(EXTS)}"
    word = rng.choice(WORDS)
    init: list[dict[str, str]] = []
    evaluation: dict[str, Any]
    if kind == "touch":
        text, script, check = f"Create an empty file {f}.", f"touch {f}", f"test -f {f}"
    elif kind == "mkdir":
        d = f"/root/{rng.choice(DIRS)}"
        text, script, check = f"Create a directory {d}.", f"mkdir {d}", f"test -d {d}"
    elif kind == "write":
        text, script, check = f"Write the word {word} into the file {f}.", f"echo {word} > {f}", f'[ "$(cat {f})" = {word} ]'
    elif kind == "remove":
        init = [{"code": f"echo {word} > {f}"}]
        text, script, check = f"Delete the file {f}.", f"rm {f}", f"test ! -e {f}"
    if kind == "read":
        init = [{"code": f"echo {word} > {f}"}]
        description = (
            f'What word is stored in the file {f}? Call bash_action with the script "cat {f}", '
            "then call answer_action with the word."
        )
        evaluation = {"match": {"answer": word, "strip": True}}
    else:
        description = f'{text} To do it, call bash_action with the script "{script}", then call finish_action.'
        evaluation = {"check": [{"code": check}], "example": {"code": script}}
    return {
        "description": description,
        "create": {"init": init},
        "evaluation": evaluation,
        "labels": [f"easy-{kind}"],
        "prompt": "easy",
        "max_turns": MAX_TURNS,
    }


def make_splits() -> dict[str, list[dict[str, Any]]]:
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for split, size, seed in (("easy", TRAIN_SIZE, 30251), ("easy-test", TEST_SIZE, 30252)):
        rng = random.Random(seed)
        problems: list[dict[str, Any]] = []
        while len(problems) < size:
            p = _problem(rng)
            if p["description"] not in seen:
                seen.add(p["description"])
                problems.append(p)
        out[split] = problems
    return out


def main() -> None:
    data = Path(__file__).parent / "data"
    for split, problems in make_splits().items():
        path = data / split / "problems.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(problems, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(problems)} problems to {path}")


if __name__ == "__main__":
    main()
