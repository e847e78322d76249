"""The ALFWorld task's samples: generated splits, or ALFWorld's own game files.

Generated splits (deterministic; task types in turn, so every split covers all six):

=========  ======  ==========================================================================
split      games   floor plans
=========  ======  ==========================================================================
``dev``    24      ALFRED's test scenes (1-6, 201-206, 301-306, 401-406): unseen in ``train``
``test``   120     the same unseen scenes, other seeds
``train``  3000    ALFRED's train scenes (7-30, 207-230, 307-330, 407-430)
=========  ======  ==========================================================================

The ``easy`` (200), ``easy-test`` (100) and ``easy-val`` (100) splits are small-room games of the
simplest type whose winning actions the prompt spells out one per turn (:mod:`.make_easy`,
shipped in ``data/``).

A generated sample is the game spec of :func:`.scenes.choose_spec` plus an ``id``. A sample of
real ALFWorld data is ``{"id", "game_file", "task_type"}`` (see :func:`load_data`).
"""

from __future__ import annotations

import json
import os
import random
from functools import cache
from pathlib import Path
from typing import Any

import alfworld.gen.constants as C

from agentrl_envs.errors import DataError

from .scenes import TASK_TYPES, choose_spec, floor_plans

SPLITS: dict[str, tuple[int, str]] = {"dev": (24, "unseen"), "test": (120, "unseen"), "train": (3000, "seen")}
#: Small-room pick-and-place games with their plan spelled out, for small-model RL: shipped in
#: ``data/`` (written by :mod:`.make_easy`).
EASY_SPLITS = ("easy", "easy-test", "easy-val")
DATA = Path(__file__).parent / "data"


@cache
def _generated(split: str) -> tuple[dict[str, Any], ...]:
    size, scenes = SPLITS[split]
    pool = C.TEST_SCENE_NUMBERS if scenes == "unseen" else C.TRAIN_SCENE_NUMBERS
    plans = [p for p in floor_plans() if p in pool]
    rng = random.Random(f"alfworld-split:{split}")
    samples = []
    for i in range(size):
        task_type = TASK_TYPES[i % len(TASK_TYPES)]
        while True:
            plan, seed = rng.choice(plans), rng.randrange(2**31)
            spec = choose_spec(task_type, plan, seed)
            if spec is not None:
                break
        samples.append({"id": f"{split}-{i:04d}-{task_type}-FloorPlan{plan}", **spec})
    return tuple(samples)


def load_split(split: str) -> list[dict[str, Any]]:
    if split in EASY_SPLITS:
        return [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    if split not in SPLITS:
        raise DataError(f"alfworld has no split {split!r}: expected one of {sorted(SPLITS) + list(EASY_SPLITS)} (or data=PATH)")
    return [dict(s) for s in _generated(split)]


def _task_type(game_file: Path) -> str:
    """``pick_heat_then_place_in_recep-Cup-None-Cabinet-10/trial_.../game.tw-pddl`` → its type."""
    return game_file.parent.parent.name.split("-", 1)[0]


def load_data(path: str | Path) -> list[dict[str, Any]]:
    """Samples of ALFWorld's own games.

    ``path`` is either a directory (e.g. ``$ALFWORLD_DATA/json_2.1.1/valid_unseen``), searched for
    ``game.tw-pddl`` files, skipping those ALFWorld skips (``movable``/``Sliced`` trials and games
    marked unsolvable), or an AgentBench split file (``data/alfworld/dev.json``:
    ``{category: [json_2.1.1/.../game.tw-pddl, ...]}``) whose paths are relative to
    the split file's directory, else to ``$ALFWORLD_DATA``."""
    path = Path(path)
    if path.is_dir():
        files = []
        for f in sorted(path.rglob("game.tw-pddl")):
            if "movable" in str(f) or "Sliced" in str(f):
                continue
            if json.loads(f.read_text()).get("solvable", True) is False:
                continue
            files.append(f)
    elif path.is_file():
        try:
            listing = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not JSON ({e})") from None
        if not isinstance(listing, dict):
            raise DataError(f"{path}: expected AgentBench's split format {{category: [game files]}}")
        roots = [path.parent] + ([Path(os.environ["ALFWORLD_DATA"])] if os.environ.get("ALFWORLD_DATA") else [])
        rels = [rel for group in listing.values() for rel in group]
        root = next((r for r in roots if all((r / rel).is_file() for rel in rels)), None)
        if root is None:
            where = " or ".join(str(r) for r in roots)
            raise DataError(f"{path}: its game files are not all under {where}, e.g. {rels[:1]} (set ALFWORLD_DATA)")
        files = [root / rel for rel in rels]
    else:
        raise DataError(f"alfworld data {path} does not exist")
    if not files:
        raise DataError(f"no ALFWorld game (game.tw-pddl) found in {path}")
    return [{"id": str(f.parent.parent.name), "game_file": str(f.resolve()), "task_type": _task_type(f)} for f in files]


def validate_sample(sample: dict[str, Any], where: str = "sample") -> dict[str, Any]:
    """A custom task: a generated game's spec or a game file; raise :class:`DataError` otherwise."""
    if not isinstance(sample, dict):
        raise DataError(f"{where}: expected an object, got {type(sample).__name__}")
    if "game_file" in sample:
        if not Path(str(sample["game_file"])).is_file():
            raise DataError(f"{where}: game_file {sample['game_file']!r} does not exist on the worker")
        return sample
    missing = [k for k in ("task_type", "floor_plan", "seed", "object", "goal") if k not in sample]
    if missing:
        raise DataError(f"{where}: a generated game needs {missing} (or give a game_file)")
    if sample["task_type"] not in TASK_TYPES:
        raise DataError(f"{where}: task_type {sample['task_type']!r} is not one of {list(TASK_TYPES)}")
    if int(sample["floor_plan"]) not in floor_plans():
        raise DataError(f"{where}: no layout for floor_plan {sample['floor_plan']!r}")
    plan = sample.get("plan")
    if sample.get("prompt") == "easy" and not (isinstance(plan, list) and plan and all(isinstance(a, str) for a in plan)):
        raise DataError(f"{where}: an easy game (prompt 'easy') needs its plan, a list of actions")
    return sample
