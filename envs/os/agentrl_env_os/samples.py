"""AgentBench ``os_interaction`` problems → samples with every script resolved to inline code.

A problem file is a JSON list (or one object, or JSONL) of
``{description, create: {local, init}, start, evaluation: {match | check, example}, labels}``;
script objects are a string (bash code), ``{"code": ...}`` or ``{"file": ...}`` (relative to the
scripts dir), with an optional ``language`` (``bash`` or ``python``). A sample is::

    {"description": str, "init": [Script], "start": Script | None,
     "match": {"answer"|"regex": str, "strip": bool} | None,
     "check": [Script | None] | None, "example": Script | None, "labels": [str],
     "prompt": "easy", "max_turns": int}      # both optional (the easy splits set them)

with ``Script = {"language": "bash"|"python", "code": str}``, so a sample is self-contained (a
client's ``custom_task`` uses the same shape, or the raw AgentBench one with inline code).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import regex

from agentrl_envs.errors import DataError

LANGUAGES = ("bash", "python")
PROMPTS = ("agentbench", "easy")


def data_dir() -> Path:
    return Path(str(resources.files("agentrl_env_os") / "data"))


def load_split(split: str) -> list[dict[str, Any]]:
    """``dev`` (26 problems, AgentBench ``data/dev.json``), ``train`` (1,000, ``training.json``),
    ``easy`` (200), ``easy-test`` or ``easy-val`` (100 each; all three from :mod:`.make_easy`)."""
    return load_path(data_dir() / split)


def load_path(path: str | Path) -> list[dict[str, Any]]:
    """``DIR`` holding ``problems.json`` and ``scripts/``, or ``PROBLEM.json`` (scripts dir next to it:
    ``scripts/`` if present, else the file's own dir)."""
    path = Path(path)
    if path.is_dir():
        problem_file, scripts = path / "problems.json", path / "scripts"
    else:
        problem_file, scripts = path, path.parent / "scripts"
        if not scripts.is_dir():
            scripts = path.parent
    if not problem_file.is_file():
        raise DataError(f"no OS problem file at {problem_file}")
    text = problem_file.read_text(encoding="utf-8")
    raw = (
        [json.loads(line) for line in text.splitlines() if line.strip()] if problem_file.suffix == ".jsonl" else json.loads(text)
    )
    raw = [raw] if isinstance(raw, dict) else raw
    return [normalize(item, scripts, where=f"{problem_file}[{i}]") for i, item in enumerate(raw)]


def _script(obj: Any, scripts_dir: Path | None, where: str) -> dict[str, str] | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return {"language": "bash", "code": obj}
    if not isinstance(obj, dict):
        raise DataError(f"{where}: a script must be a string or an object, got {type(obj).__name__}")
    language = obj.get("language", "bash")
    if language not in LANGUAGES:
        raise DataError(f"{where}: unsupported script language {language!r} (supported: {', '.join(LANGUAGES)})")
    if "code" in obj:
        if not isinstance(obj["code"], str):
            raise DataError(f"{where}: a script's 'code' must be a string")
        return {"language": language, "code": obj["code"]}
    if "file" in obj:
        if scripts_dir is None:
            raise DataError(f"{where}: script file {obj['file']!r} but no scripts dir (inline it as 'code')")
        try:
            return {"language": language, "code": (scripts_dir / obj["file"]).read_text(encoding="utf-8")}
        except OSError as e:
            raise DataError(f"{where}: cannot read script {obj['file']!r}: {e}") from None
    raise DataError(f"{where}: a script object needs 'code' or 'file'")


def normalize(item: dict[str, Any], scripts_dir: Path | None = None, *, where: str = "sample") -> dict[str, Any]:
    """An AgentBench problem (or an already normalized sample) → a sample; raise DataError if invalid.

    Both shapes are checked alike (a client's ``custom_task`` may be either): scripts, the match
    (its regex must compile), the prompt and ``max_turns``."""
    if not isinstance(item, dict):
        raise DataError(f"{where}: an OS problem must be an object, got {type(item).__name__}")
    if "init" in item and "evaluation" not in item:  # already normalized
        return _checked_sample(item, where)
    if not isinstance(item.get("description"), str) or not isinstance(item.get("evaluation"), dict):
        raise DataError(f"{where}: an OS problem needs 'description' and 'evaluation'")
    create = item.get("create")
    # AgentBench reads `init` only from a dict `create` (one dev problem has a list there).
    init = create.get("init") if isinstance(create, dict) else None
    init_list = [] if init is None else init if isinstance(init, list) else [init]
    ev = item["evaluation"]
    match = check = example = None
    if "match" in ev:
        m = ev["match"]
        match = _checked_match({"answer": m, "strip": True} if isinstance(m, str) else m, where)
    elif "check" in ev:
        chain = ev["check"] if isinstance(ev["check"], list) else [ev["check"]]
        check = [_script(s, scripts_dir, where) for s in chain]
        example = _script(ev.get("example"), scripts_dir, where)
        if any(s is None for s in check) and example is None:
            raise DataError(f"{where}: a null check entry needs evaluation.example")
    else:
        raise DataError(f"{where}: evaluation needs 'match' or 'check'")
    return _sample(item, init_list, match, check, example, scripts_dir, where)


def _sample(
    item: dict[str, Any],
    init: list[Any],
    match: dict[str, Any] | None,
    check: list[dict[str, str] | None] | None,
    example: dict[str, str] | None,
    scripts_dir: Path | None,
    where: str,
) -> dict[str, Any]:
    """The sample: the judging as given; description, init and start scripts, labels, prompt and
    ``max_turns`` from ``item``, checked."""
    labels = item.get("labels") or []
    if not isinstance(labels, list):
        raise DataError(f"{where}: 'labels' must be a list")
    extra = {}
    if item.get("prompt") is not None:
        if item["prompt"] not in PROMPTS:
            raise DataError(f"{where}: unknown prompt {item['prompt']!r} (known: {', '.join(PROMPTS)})")
        extra["prompt"] = item["prompt"]
    if item.get("max_turns") is not None:
        if type(item["max_turns"]) is not int or item["max_turns"] < 1:
            raise DataError(f"{where}: max_turns must be a positive integer")
        extra["max_turns"] = item["max_turns"]
    return {
        "description": item["description"],
        "init": [_script(s, scripts_dir, where) for s in init],
        "start": _script(item.get("start"), scripts_dir, where),
        "match": match,
        "check": check,
        "example": example,
        "labels": list(labels),
        **extra,
    }


def _checked_match(match: Any, where: str) -> dict[str, Any]:
    if not isinstance(match, dict) or not ({"answer", "regex"} & match.keys()):
        raise DataError(f"{where}: evaluation.match needs 'answer' or 'regex'")
    for key in ("answer", "regex"):
        if key in match and not isinstance(match[key], str):
            raise DataError(f"{where}: match.{key} must be a string")
    if "regex" in match:
        try:
            regex.compile(match["regex"])
        except regex.error as e:
            raise DataError(f"{where}: match.regex does not compile: {e}") from None
    return dict(match)


def _checked_sample(item: dict[str, Any], where: str) -> dict[str, Any]:
    """An already normalized sample (the shape in the module doc), checked as :func:`normalize`
    checks a raw problem; returned as a new dict."""
    if not isinstance(item.get("description"), str):
        raise DataError(f"{where}: a sample needs a string 'description'")
    init, check = item.get("init"), item.get("check")
    if not isinstance(init, list) or None in init or (check is not None and not isinstance(check, list)):
        raise DataError(f"{where}: a sample's 'init' is a list of scripts and its 'check' a list or null")
    match = _checked_match(item["match"], where) if item.get("match") is not None else None
    checks = [_script(c, None, where) for c in check] if check is not None else None
    example = _script(item.get("example"), None, where)
    if (match is None) == (checks is None):
        raise DataError(f"{where}: a sample needs exactly one of 'match' and 'check'")
    if checks is not None and any(c is None for c in checks) and example is None:
        raise DataError(f"{where}: a null check entry needs 'example'")
    return _sample(item, init, match, checks, example, None, where)
