"""Generate the ``easy``, ``easy-test`` and ``easy-val`` splits of the OS task (deterministic).

    python -m agentrl_env_os.make_easy   # writes data/easy/, data/easy-test/, data/easy-val/ (problems.json)

Real OS problems (AgentBench's format, the task's tools, sandbox and judging) that a 135M model
solves about a third of the time (15/48 of the first ``easy-test`` problems at temperature 0.7
under the trainer's tool-call grammar; ``benchmarks/base_rate.py``): one small file-system
change in ``/root`` whose bash command is spelled out in the problem (create a file or a
directory, write a word into a file, delete a file), judged by a ``check`` script, plus problems
that ask for the word stored in a file (judged by ``match``). Two calls: ``bash_action``, then
``finish_action`` (or ``answer_action``). The problems carry ``"prompt": "easy"`` (a short
system prompt with two worked examples, :data:`.prompts.EASY_SYSTEM_PROMPT`, and the bare
problem as the user message) and ``"max_turns": 3``.

``easy`` (train, 200 problems), ``easy-test`` (held out, 100: reported figures only) and
``easy-val`` (held out, 100: choosing settings, e.g. the demo's learning rate) are drawn with
different seeds, in that order, and no two share a description. ``easy-val`` is drawn last, so
adding it left ``easy`` and ``easy-test`` byte for byte as they were; it has exactly
``easy-test``'s mix of kinds, and its file names also come from :data:`VAL_STEMS`, since the
first two splits used nearly every file name of the kinds whose description names no word.
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

STEMS = ["notes", "report", "todo", "backup", "data", "log", "draft", "list", "config", "summary", "plan", "index"]
EXTS = ["txt", "log", "md", "csv", "cfg"]
DIRS = ["projects", "archive", "tmp2", "docs", "photos", "music", "scripts", "build", "cache", "work", "old", "src"]
#: File stems of ``easy-val`` only (with ``STEMS``): ``easy`` and ``easy-test`` used up nearly every
#: file name of the create / delete / read kinds, whose descriptions name no word.
VAL_STEMS = ["memo", "journal", "budget", "invoice", "recipe", "agenda", "letter", "story", "sketch", "quotes", "tasks", "events"]
WORDS = ["apple", "river", "orange", "falcon", "silver", "garden", "rocket", "pepper", "window", "marble", "tiger", "candle"]


def _problem(rng: random.Random, kind: str | None = None, stems: list[str] = STEMS) -> dict[str, Any]:
    kind = kind or rng.choice(["touch", "mkdir", "write", "remove", "read"])
    f = f"/root/{rng.choice(stems)}.{rng.choice(EXTS)}"
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
    # easy-val: exactly easy-test's mix of kinds (in a shuffled order), file names from STEMS + VAL_STEMS.
    rng = random.Random(30253)
    kinds = [p["labels"][0].removeprefix("easy-") for p in out["easy-test"]][:VAL_SIZE]
    rng.shuffle(kinds)
    val: list[dict[str, Any]] = []
    for kind in kinds:
        while True:
            p = _problem(rng, kind, STEMS + VAL_STEMS)
            if p["description"] not in seen:
                seen.add(p["description"])
                val.append(p)
                break
    out["easy-val"] = val
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
