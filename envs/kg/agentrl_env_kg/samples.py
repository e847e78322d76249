"""AgentBench's KG data format: a JSON list (or JSON Lines) of questions.

Each question: ``question`` (text), ``entities`` (``{name: mid}``, the names the model sees),
``answer`` (``[{"answer_argument": mid or value, ...}]``), and, for the reference policy,
``actions`` (AgentBench's gold calls, e.g. ``get_neighbors(#0,film.film.starring)``); ``qid``,
``source`` and ``s_expression`` are kept as they are. Optional: ``prompt`` (``"agentbench"``, the
default, or ``"easy"``: the short prompt and worked examples of the easy splits) and
``max_turns`` (the session's round limit; the ``max_turns`` option overrides it).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from agentrl_envs.errors import DataError

SPLITS = ("dev", "train", "test", "easy", "easy-val", "easy-test")
PROMPTS = ("agentbench", "easy")


def validate(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise DataError(f"{where}: a question must be an object, got {type(item).__name__}")
    for key, kind in (("question", str), ("entities", dict), ("answer", list)):
        if not isinstance(item.get(key), kind):
            raise DataError(f"{where}: field {key!r} must be a {kind.__name__}")
    for a in item["answer"]:
        if not isinstance(a, dict) or "answer_argument" not in a:
            raise DataError(f"{where}: every answer needs an 'answer_argument'")
    if item.get("prompt") is not None and item["prompt"] not in PROMPTS:
        raise DataError(f"{where}: 'prompt' must be one of {list(PROMPTS)}, got {item['prompt']!r}")
    max_turns = item.get("max_turns")
    if max_turns is not None and (type(max_turns) is not int or max_turns < 1):
        raise DataError(f"{where}: 'max_turns' must be a positive integer, got {max_turns!r}")
    actions = item.get("actions")
    if actions is not None and not (isinstance(actions, list) and all(isinstance(a, str) for a in actions)):
        raise DataError(f"{where}: 'actions' must be a list of strings")
    return item


def gold_answers(sample: dict[str, Any]) -> set[str]:
    return {str(a["answer_argument"]) for a in sample.get("answer", [])}


def parse(text: str, where: str) -> list[dict[str, Any]]:
    text = text.strip()
    try:
        if text.startswith("["):
            items = json.loads(text)
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not JSON or JSON Lines ({e})") from None
    return [validate(item, f"{where}[{i}]") for i, item in enumerate(items)]


def load_file(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"KG data {p}: no such file (give an AgentBench knowledgegraph .json file)")
    return parse(p.read_text(encoding="utf-8"), str(p))


def load_split(split: str) -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise DataError(f"task 'kg' has no split {split!r}; its splits are {list(SPLITS)}")
    text = resources.files("agentrl_env_kg").joinpath("data", f"{split}.json").read_text(encoding="utf-8")
    return parse(text, f"kg split {split}")
