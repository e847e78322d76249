"""Generate the ``easy``, ``easy-test`` and ``easy-val`` splits of the ALFWorld task (deterministic).

    python -m agentrl_env_alfworld.make_easy   # writes data/easy.jsonl, data/easy-test.jsonl, data/easy-val.jsonl
                                               # and data/easy_example.json (the worked example, played)

Real ALFWorld games (the task's engine, observations and ``won`` signal) of the simplest type,
``pick_and_place_simple``, in a small room: three receptacles of one of ALFRED's floor plans
(two where the plan has no third type; none that opens, one of each type), the target object
and two or three others. The sample names the four actions that win it (``plan``: go to the
object's receptacle, take it, go to the goal receptacle, put it there); the easy prompt ends
every message with the next of them (``Next action: ...``, :func:`.prompts.next_action`), so
the model has to copy one per turn. The samples carry ``"prompt": "easy"``
(:func:`.prompts.opening_messages`) and ``"max_turns": 4``: no round to spare.

``easy`` (train, 200 games), ``easy-test`` (held out, 100: reported figures only) and
``easy-val`` (held out, 100: choosing settings) are drawn with different seeds, in that order,
and no two games (nor the worked example) share a goal with the same plan.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import alfworld.gen.goal_library as goal_library

from agentrl_envs.protocol.openai import worked_example

from .pool import EnginePool
from .prompts import EASY_EXAMPLE, easy_message, next_action, process_ob, task_message
from .reference import TOOL, expert_steps
from .scenes import PICKUPABLE, _can_hold, build_game, floor_plans, load_layout

TRAIN_SIZE = 200
TEST_SIZE = 100
VAL_SIZE = 100
MAX_TURNS = 4
TASK_TYPE = "pick_and_place_simple"
DATA = Path(__file__).parent / "data"


def plan_actions(spec: dict[str, Any]) -> list[str]:
    """The expert's commands for a generated game, as the agentbench grammar words them."""
    steps = expert_steps(build_game(spec))
    return [f"put {s[1]} in/on {s[2]}" if s[0] == "put" else s[1] for s in steps]


def easy_spec(rng: random.Random, plan: int, *, smallest: bool = False) -> dict[str, Any] | None:
    """A small-room pick-and-place game on floor plan ``plan``, or ``None`` if it has no fit: the
    start and goal receptacles and one more (where the plan has one), the target and two or three
    other objects; ``smallest``: two receptacles and one other object (the worked example)."""
    layout = load_layout(plan)
    by_type: dict[str, list[Any]] = {}
    for r in layout.receptacles:
        if not r.openable:
            by_type.setdefault(r.type, []).append(r)
    types = sorted(by_type)
    objects = [o for o in layout.object_types if o in PICKUPABLE]
    triples = [(o, s, d) for o in objects for s in types for d in types if s != d and _can_hold(s, o) and _can_hold(d, o)]
    if not triples:
        return None
    obj, start, dest = rng.choice(triples)
    others = [t for t in types if t not in (start, dest)]
    room_types = [start, dest] + rng.sample(others, 0 if smallest else min(1, len(others)))
    receps = {t: rng.choice(by_type[t]) for t in room_types}
    if len({r.location for r in receps.values()}) < len(receps):
        return None  # two receptacles at one interaction point: going to one arrives at both
    things = [[obj, receps[start].id]]
    candidates = [o for o in objects if o != obj]
    for other in rng.sample(candidates, min(len(candidates), 1 if smallest else rng.randint(2, 3))):
        spots = [receps[t].id for t in room_types if _can_hold(t, other)]
        if spots:
            things.append([other, rng.choice(spots)])
    spec: dict[str, Any] = {
        "task_type": TASK_TYPE,
        "floor_plan": plan,
        "seed": rng.randrange(2**31),
        "object": obj,
        "receptacle": dest,
        "toggle": None,
        "goal": rng.choice(goal_library.gdict[TASK_TYPE]["templates"]).format(obj=obj.lower(), recep=dest.lower()),
        "room": {"receptacles": sorted(r.id for r in receps.values()), "objects": things},
    }
    spec["plan"] = plan_actions(spec)
    spec["prompt"] = "easy"
    spec["max_turns"] = MAX_TURNS
    return spec


def _key(spec: dict[str, Any]) -> str:
    return json.dumps([spec["goal"], spec["plan"]])


#: The worked example's game (kept out of every split).
EXAMPLE_SEED = 20260


def _draw(rng: random.Random, plans: list[int], *, smallest: bool = False) -> dict[str, Any]:
    while True:
        spec = easy_spec(rng, rng.choice(plans), smallest=smallest)
        if spec is not None:
            return spec


def make_splits() -> dict[str, list[dict[str, Any]]]:
    """``{"easy": [...200], "easy-test": [...100], "easy-val": [...100]}``, the same every time."""
    plans = floor_plans()
    seen = {_key(example_spec())}
    out: dict[str, list[dict[str, Any]]] = {}
    for split, size, seed in (("easy", TRAIN_SIZE, 20261), ("easy-test", TEST_SIZE, 20262), ("easy-val", VAL_SIZE, 20263)):
        rng = random.Random(seed)
        samples: list[dict[str, Any]] = []
        while len(samples) < size:
            spec = _draw(rng, plans)
            if _key(spec) not in seen:
                seen.add(_key(spec))
                samples.append({"id": f"{split}-{len(samples):04d}-FloorPlan{spec['floor_plan']}", **spec})
        out[split] = samples
    return out


def example_spec() -> dict[str, Any]:
    """The worked example's game: the first draw of its seed in the smallest room (two
    receptacles, the target and one other object), so that the example's turns stay short."""
    rng = random.Random(EXAMPLE_SEED)
    while True:
        spec = _draw(rng, floor_plans(), smallest=True)
        if len(spec["room"]["objects"]) == 2:
            return spec


async def play_example() -> list[dict[str, Any]]:
    """The worked example as chat turns: :func:`example_spec`'s game played on the task's engine
    with its plan, each action as an assistant tool call and the engine's answer as the tool's."""
    spec = example_spec()
    pool = EnginePool(0)
    try:
        lease, observation = await pool.start({"spec": spec, "logic": "agentbench"})
        plan = spec["plan"]
        user = easy_message(task_message(observation.text), next_action(plan, 0, observation.commands))
        calls = []
        for done, action in enumerate(plan, 1):
            observation = await pool.step(lease, action)
            # the last action wins the game: the task spells out no more
            hint = next_action(plan, done, observation.commands) if done < len(plan) else None
            calls.append((TOOL, {"action": action}, easy_message(process_ob(observation.text), hint)))
        if not observation.won:
            raise RuntimeError(f"the worked example's plan does not win its game: {spec}")
        await pool.release(lease)
    finally:
        await pool.close()
    return worked_example(user, calls, id_prefix="example")


def write_example() -> None:
    """Play the worked example and write it to ``data/easy_example.json``."""
    EASY_EXAMPLE.write_text(json.dumps(asyncio.run(play_example()), indent=1) + "\n", encoding="utf-8")
    print(f"wrote the worked example to {EASY_EXAMPLE}")


def main() -> None:
    DATA.mkdir(exist_ok=True)
    for split, samples in make_splits().items():
        path = DATA / f"{split}.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
        print(f"wrote {len(samples)} samples to {path}")
    write_example()


if __name__ == "__main__":
    main()
